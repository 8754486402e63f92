package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/pkg/sftp"
	gossh "golang.org/x/crypto/ssh"
)

// sftpMaxPacket is the payload of one SFTP write request. OpenSSH's
// sftp-server accepts requests up to 256 KiB (it advertises 255 KiB of data
// in limits@openssh.com); larger requests mean fewer round trips and packet
// headers than the package's conservative 32 KiB default.
const sftpMaxPacket = 128 << 10

// sftpMaxInflight bounds the write requests in flight for one file.
const sftpMaxInflight = 64

// sftpCleanupTimeout bounds the removal of a partial file when the transfer
// failed because the connection or the caller's context ended.
const sftpCleanupTimeout = 5 * time.Second

// WriteFile implements backend.FileWriter over SFTP: it creates name (an
// absolute path on the remote host) exclusively with permission bits perm
// (before the remote umask) and fills it with exactly size bytes read from
// r, as concurrent write requests on an "sftp" subsystem channel of the
// backend's connection. The SFTP client is opened on first use and reused;
// a new connection gets a new one. On any failure the partial file is
// removed.
//
// When the server does not offer the sftp subsystem, WriteFile returns an
// error wrapping backend.ErrUnsupported (remembered for the connection), so
// the caller moves the bytes through the shell instead. An existing name is
// refused with an error wrapping fs.ErrExist.
//
// Cancelling ctx stops the transfer between requests; a server that stops
// answering is noticed by the connection's keep-alives.
func (b *Backend) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	if !path.IsAbs(name) {
		return fmt.Errorf("ssh: sftp write %s: path is not absolute", name)
	}
	if size < 0 {
		return fmt.Errorf("ssh: sftp write %s: negative size %d", name, size)
	}
	src := &ctxReader{ctx: ctx, r: io.LimitReader(r, size)}
	for attempt := 0; ; attempt++ {
		c, sc, err := b.sftpClient(ctx)
		if err != nil {
			return fmt.Errorf("ssh: sftp write %s: %w", name, err)
		}
		err = b.writeSFTP(ctx, c, sc, name, src, size, perm)
		retry := err != nil && attempt == 0 && src.n == 0 && ctx.Err() == nil && sc.lost(c)
		b.sftpDone(c, sc)
		if err == nil {
			b.sftpWrites.Add(1)
			return nil
		}
		if retry {
			// The connection (or the sftp channel) was found dead before
			// any byte was consumed: retry once on a fresh one, as Start
			// redials once.
			b.log.Info("ssh: sftp channel lost; reconnecting", "target", b.t.String(), "why", err)
			continue
		}
		return fmt.Errorf("ssh: sftp write %s: %w", name, err)
	}
}

// writeSFTP creates name and streams size bytes from src into it; on
// failure it removes what it created.
func (b *Backend) writeSFTP(ctx context.Context, c *conn, sc *sftpChan, name string, src *ctxReader, size int64, perm os.FileMode) (err error) {
	cl := sc.cl
	f, err := cl.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		var se *sftp.StatusError
		if errors.As(err, &se) {
			// SFTP v3 has no "already exists" status: OpenSSH answers
			// O_EXCL on an existing name with a generic failure.
			if _, lerr := cl.Lstat(name); lerr == nil {
				return fmt.Errorf("create: %w", fs.ErrExist)
			}
		}
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			b.removePartial(ctx, c, sc, name)
		}
	}()
	inflight := int(min(size/sftpMaxPacket+1, sftpMaxInflight))
	n, err := f.ReadFromWithConcurrency(src, inflight)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return cerr
		}
		return fmt.Errorf("after %d of %d bytes: %w", n, size, err)
	}
	if n != size {
		return fmt.Errorf("the reader ended after %d of %d bytes", n, size)
	}
	if perm&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0o666 {
		if err := chmodUnderUmask(f, perm); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// chmodUnderUmask gives f the mode perm would have had if SFTP's open could
// pass it: the server created f with 0666 under its umask, which tells the
// umask's read and write bits; an execute bit is masked when the read bit of
// the same class is (true of every usual umask: 022, 002, 027, 077).
func chmodUnderUmask(f *sftp.File, perm os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	umask := 0o666 &^ fi.Mode().Perm()
	umask |= (umask & 0o444) >> 2
	mode := perm &^ umask & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %v: %w", mode, err)
	}
	return nil
}

// removePartial removes a file whose transfer failed, through sc, or when
// sc has died (the connection dropped) through a fresh client.
func (b *Backend) removePartial(ctx context.Context, c *conn, sc *sftpChan, name string) {
	err := sc.cl.Remove(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && sc.lost(c) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sftpCleanupTimeout)
		defer cancel()
		var c2 *conn
		var sc2 *sftpChan
		if c2, sc2, err = b.sftpClient(rctx); err == nil {
			err = sc2.cl.Remove(name)
			b.sftpDone(c2, sc2)
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.log.Warn("ssh: could not remove a partial file", "path", name, "err", err)
	}
}

// sftpChan is an SFTP client on one "sftp" subsystem channel.
type sftpChan struct {
	cl    *sftp.Client
	ended chan struct{} // closed once the channel has ended
}

// lost reports whether sc can no longer be used: its connection or its
// channel has ended. It gives a connection that is going down a moment to
// be noticed.
func (sc *sftpChan) lost(c *conn) bool {
	select {
	case <-sc.ended:
		return true
	case <-c.done:
		return true
	case <-time.After(200 * time.Millisecond):
	}
	return !c.alive()
}

// sftpDone ends one use of sc. The client of an overflow connection is
// closed when its last user is done, so it does not keep that connection
// open; the main connection keeps its client for the next write.
func (b *Backend) sftpDone(c *conn, sc *sftpChan) {
	main := b.isMain(c)
	c.mu.Lock()
	c.sftpUsers--
	idle := c.sftpUsers == 0 && !main && c.sftp == sc
	if idle {
		c.sftp = nil
	}
	c.mu.Unlock()
	if idle {
		sc.cl.Close()
	}
}

// isMain reports whether c is the backend's main connection.
func (b *Backend) isMain(c *conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns) > 0 && b.conns[0] == c
}

// sftpClient returns the SFTP client of a live connection, opening it when
// there is none, with the same retry policy as Start (onConn).
// Every successful call must be paired with sftpDone.
func (b *Backend) sftpClient(ctx context.Context) (*conn, *sftpChan, error) {
	var sc *sftpChan
	c, err := b.onConn(ctx, func(err error) error { return err }, func(c *conn) (err error) {
		sc, err = b.sftpOn(ctx, c)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return c, sc, nil
}

type subsystemRequest struct {
	Name string
}

// sftpOn returns c's SFTP client, opening it on first use. A refusal of the
// subsystem is remembered for c and returned wrapping
// backend.ErrUnsupported.
func (b *Backend) sftpOn(ctx context.Context, c *conn) (*sftpChan, error) {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	c.mu.Lock()
	sc, refused := c.sftp, c.sftpRefused
	if sc != nil {
		select {
		case <-sc.ended:
			c.sftp, sc = nil, nil
		default:
			c.sftpUsers++
		}
	}
	c.mu.Unlock()
	if refused != nil {
		return nil, refused
	}
	if sc != nil {
		return sc, nil
	}

	type result struct {
		cl      *sftp.Client
		refused bool
		err     error
	}
	res := make(chan result, 1)
	go func() {
		ch, reqs, err := c.client.OpenChannel("session", nil)
		if err != nil {
			res <- result{err: err}
			return
		}
		go gossh.DiscardRequests(reqs)
		go func() { _, _ = io.Copy(io.Discard, ch.Stderr()) }()
		ok, err := ch.SendRequest("subsystem", true, gossh.Marshal(subsystemRequest{Name: "sftp"}))
		if err != nil {
			ch.Close()
			res <- result{err: fmt.Errorf("request the sftp subsystem: %w", err)}
			return
		}
		if !ok {
			ch.Close()
			res <- result{refused: true, err: errors.New("the server refused the sftp subsystem")}
			return
		}
		cl, err := sftp.NewClientPipe(ch, ch,
			sftp.UseConcurrentWrites(true),
			sftp.MaxPacketUnchecked(sftpMaxPacket),
			sftp.MaxConcurrentRequestsPerFile(sftpMaxInflight))
		if err != nil {
			ch.Close()
			// The subsystem was accepted but no SFTP server answered
			// (its program is missing or failed): as good as refused,
			// unless the connection itself went down.
			res <- result{refused: c.alive(), err: fmt.Errorf("start sftp: %w", err)}
			return
		}
		res <- result{cl: cl}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		go func() {
			if r := <-res; r.cl != nil {
				r.cl.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if r.refused {
		err := fmt.Errorf("%s does not offer SFTP (%v): %w", b.t, r.err, backend.ErrUnsupported)
		b.log.Debug("ssh: no sftp on this connection; files travel through the shell", "target", b.t.String(), "why", r.err)
		c.mu.Lock()
		c.sftpRefused = err
		c.mu.Unlock()
		return nil, err
	}
	if r.err != nil {
		return nil, r.err
	}
	b.sftpOpens.Add(1)
	sc = &sftpChan{cl: r.cl, ended: make(chan struct{})}
	c.mu.Lock()
	c.nchannels++
	c.sftp = sc
	c.sftpUsers++
	c.mu.Unlock()
	go func() {
		// Forget the client once its channel ends (Close, a dropped
		// connection, a dead sftp-server) so the next write opens another.
		_ = sc.cl.Wait()
		close(sc.ended)
		c.mu.Lock()
		if c.sftp == sc {
			c.sftp = nil
		}
		c.mu.Unlock()
		b.release(c)
	}()
	return sc, nil
}

// ctxReader reads from r until ctx ends and counts what it delivered.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	n   int64
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}
