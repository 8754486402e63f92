package backend

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// exitedProc is a process that has exited with status 0 and no output
// before its caller closes its stdin: the close fails, as an ssh channel's
// does once the remote side closed it.
type exitedProc struct{}

type closedStdin struct{}

func (closedStdin) Write(p []byte) (int, error) { return 0, io.EOF }
func (closedStdin) Close() error                { return io.EOF }

func (exitedProc) Stdin() io.WriteCloser { return closedStdin{} }
func (exitedProc) Stdout() io.Reader     { return bytes.NewReader(nil) }
func (exitedProc) Wait() (int, error)    { return 0, nil }
func (exitedProc) Close() error          { return nil }

type exitedBackend struct{}

func (exitedBackend) Name() string { return "exited" }
func (exitedBackend) Start(context.Context, ProcSpec) (Process, error) {
	return exitedProc{}, nil
}
func (exitedBackend) Close(context.Context) error { return nil }

// TestOutputClosingStdinOfAnExitedProcess: a process that exited 0 with
// no output before its stdin was closed ran fine (echo x >file; ssh's
// close then fails with EOF): Output reports no error, whichever came
// first.
func TestOutputClosingStdinOfAnExitedProcess(t *testing.T) {
	if _, code, err := Output(context.Background(), exitedBackend{}, ProcSpec{Argv: []string{"true"}}, nil, 0); err != nil || code != 0 {
		t.Fatalf("no stdin: code %d, err %v; want 0 and no error", code, err)
	}
}
