package modal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
)

// writeChunk is how much content one SandboxFile.Write call carries (one
// filesystem RPC and its output stream).
const writeChunk = 8 << 20

// WriteFile implements backend.FileWriter through Modal's file API
// (Sandbox.Open with mode "x", then writes of up to 8 MiB each): the file
// is created exclusively, so an existing one is refused; content shorter
// than size fails and the partial file is removed. Files are created with
// the default mode of Modal's file server (0666 less its umask); another
// perm is applied with chmod, honouring the environment's umask.
//
// A path the file API cannot open is declined (backend.ErrUnsupported) and
// the shell takes over, so its error is the one the user sees.
func (b *Backend) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	if !path.IsAbs(name) || path.Clean(name) != name || name == "/" {
		return fmt.Errorf("modal: write %s: want a clean absolute file path", name)
	}
	if size < 0 {
		return fmt.Errorf("modal: write %s: negative size %d", name, size)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	if b.sb == nil || b.dead(ctx) {
		if err := b.recreate(ctx, errors.New("sandbox finished")); err != nil {
			b.mu.Unlock()
			return err
		}
	}
	f, err := b.sb.Open(ctx, name, "x")
	b.mu.Unlock()
	if err != nil {
		var fe modal.SandboxFilesystemError
		if errors.As(err, &fe) {
			// The API reports errno text (EEXIST: "File exists").
			if msg := strings.ToLower(fe.Exception); strings.Contains(msg, "file exists") || strings.Contains(msg, "already exists") {
				return fmt.Errorf("modal: write %s: the file already exists: %w", name, err)
			}
			return fmt.Errorf("modal: write %s through the file API: %v: %w", name, err, backend.ErrUnsupported)
		}
		return b.wrap(err, "open %s", name)
	}
	n, err := io.CopyBuffer(chunked{f}, io.LimitReader(r, size), make([]byte, min(size, writeChunk)+1))
	if err == nil && n != size {
		err = fmt.Errorf("content ended after %d of %d bytes", n, size)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		b.remove(ctx, name)
		return fmt.Errorf("modal: write %s: %w", name, err)
	}
	if perm&0o777 != 0o666 {
		script := `m=$(umask); chmod "$(printf '%o' $(( 0$1 & ~0$m )))" -- "$2"`
		out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script, "berth-chmod", strconv.FormatUint(uint64(perm&0o777), 8), name}}, nil, 4096)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(string(out)))
		}
		if err != nil {
			b.remove(ctx, name)
			return fmt.Errorf("modal: set the mode of %s to %o: %w", name, perm&0o777, err)
		}
	}
	return nil
}

// remove deletes a partly written file, best effort.
func (b *Backend) remove(ctx context.Context, name string) {
	ctx = context.WithoutCancel(ctx)
	if _, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"rm", "-f", "--", name}}, nil, 4096); err != nil || code != 0 {
		b.log.Warn("modal: remove a partly written file", "path", name, "exit", code, "err", err)
	}
}

// chunked hands a SandboxFile writes of at most writeChunk bytes.
type chunked struct{ f *modal.SandboxFile }

func (c chunked) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), writeChunk)
		if _, err := c.f.Write(p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}
