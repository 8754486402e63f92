package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/a55dbaac/berth/backend"
)

// errHandleClosed is returned by a handle's Start after its Close.
var errHandleClosed = errors.New("backendtest: this case's handle on the shared environment is closed")

// handle is one case's view of its group's shared backend: everything goes
// to the backend except Close, which ends the handle only (Start is
// refused after it, as the contract wants of a closed backend), so that a
// case's teardown — a terminal.Environment's Close, a manager's CloseAll,
// an idle sweep — cannot end the environment the group's other cases run
// on. The group closes the backend itself when its last case has ended.
//
// It reports the backend's optional behaviours as the backend does:
// Capabilities, SessionEnv, Recreated and Renew answer what the backend
// answers, or what their absence means (nothing to report, nothing to
// export, not recreated, not carried over); FileWriter is implemented only
// over a backend that implements it (share picks the type), since its mere
// presence changes which path write_file takes. OneShotRunner, which only
// berth bench asks for, is not forwarded.
type handle struct {
	be     backend.Backend
	closed atomic.Bool
}

// share returns a new handle on be.
func share(be backend.Backend) backend.Backend {
	h := &handle{be: be}
	if fw, ok := be.(backend.FileWriter); ok {
		return &fileWriterHandle{handle: h, fw: fw}
	}
	return h
}

func (h *handle) Name() string { return h.be.Name() }

func (h *handle) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if h.closed.Load() {
		return nil, fmt.Errorf("%s: start %q: %w", h.be.Name(), spec.Argv, errHandleClosed)
	}
	return h.be.Start(ctx, spec)
}

// Close ends the handle, not the shared environment.
func (h *handle) Close(context.Context) error {
	h.closed.Store(true)
	return nil
}

func (h *handle) Capabilities() backend.Capabilities { return backend.CapabilitiesOf(h.be) }

func (h *handle) SessionEnv() map[string]string {
	if se, ok := h.be.(backend.SessionEnver); ok {
		return se.SessionEnv()
	}
	return nil
}

func (h *handle) Recreated() bool {
	if r, ok := h.be.(backend.Recreator); ok {
		return r.Recreated()
	}
	return false
}

func (h *handle) Renew(ctx context.Context) bool {
	if r, ok := h.be.(backend.Renewer); ok {
		return r.Renew(ctx)
	}
	return false
}

// fileWriterHandle is a handle on a backend with a file API.
type fileWriterHandle struct {
	*handle
	fw backend.FileWriter
}

func (h *fileWriterHandle) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	if h.closed.Load() {
		return fmt.Errorf("%s: write %s: %w", h.be.Name(), name, errHandleClosed)
	}
	return h.fw.WriteFile(ctx, name, r, size, perm)
}

var (
	_ backend.Capable      = (*handle)(nil)
	_ backend.SessionEnver = (*handle)(nil)
	_ backend.Recreator    = (*handle)(nil)
	_ backend.Renewer      = (*handle)(nil)
	_ backend.FileWriter   = (*fileWriterHandle)(nil)
)
