package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// The copy's pipe keeps what the source wrote up to its bound (a write
// past it waits for the reader), gives it all to the reader before the
// writer's end, and a reader that leaves fails the writer at once.
func TestAheadPipe(t *testing.T) {
	p := newAheadPipe(8)
	r, w := aheadReader{p}, aheadWriter{p}
	if n, err := w.Write([]byte("12345")); n != 5 || err != nil {
		t.Fatalf("a write within the bound: %d %v", n, err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte("6789abcd"))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("a write past the bound returned before anything was read: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	got := make([]byte, 0, 13)
	buf := make([]byte, 3)
	for len(got) < 13 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if err := <-wrote; err != nil || string(got) != "123456789abcd" {
		t.Fatalf("read %q, the write: %v", got, err)
	}
	boom := errors.New("source failed")
	w.Write([]byte("xy"))
	w.CloseWithError(boom)
	if b, err := io.ReadAll(r); !errors.Is(err, boom) || string(b) != "xy" {
		t.Errorf("after the writer's error: %q %v, want what was kept, then the error", b, err)
	}

	p = newAheadPipe(4)
	r, w = aheadReader{p}, aheadWriter{p}
	go func() { wrote <- func() error { _, err := w.Write(bytes.Repeat([]byte("z"), 10)); return err }() }()
	time.Sleep(50 * time.Millisecond)
	gone := errors.New("destination failed")
	r.CloseWithError(gone)
	select {
	case err := <-wrote:
		if !errors.Is(err, gone) {
			t.Errorf("a write waiting when the reader left: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write waiting when the reader left did not return")
	}
	if n, err := r.Read(make([]byte, 4)); n != 0 || err == nil {
		t.Errorf("read after close: %d %v", n, err)
	}

	p = newAheadPipe(4)
	r, w = aheadReader{p}, aheadWriter{p}
	w.Write([]byte("ab"))
	w.Close()
	if b, err := io.ReadAll(r); err != nil || string(b) != "ab" {
		t.Errorf("after Close: %q %v", b, err)
	}
}
