package main

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// A step is drawn on one line rewritten in place: its start, its updates
// (throttled), and an end that says how it went and moves to a new line.
func TestProgressLine(t *testing.T) {
	var b strings.Builder
	p := newProgressLine(&b, time.Hour)
	opts := backend.Options{Progress: p.show}
	s := opts.Begin("pulling image x:1", "bytes")
	s.Update(1<<20, 4<<20)
	s.Update(2<<20, 4<<20) // within the throttle: not drawn
	s.End(nil)
	f := opts.Begin("creating sandbox", "")
	f.End(errors.New("boom"))
	got := b.String()
	for _, want := range []string{
		"\r\x1b[Kberth: pulling image x:1 ...",
		"\r\x1b[Kberth: pulling image x:1: 1.0 MiB of 4.0 MiB (25%)",
		"\r\x1b[Kberth: pulling image x:1: done in ",
		"\r\x1b[Kberth: creating sandbox: failed after ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%q", want, got)
		}
	}
	if strings.Contains(got, "2.0 MiB") {
		t.Errorf("an update within the throttle was drawn:\n%q", got)
	}
	if strings.Count(got, "\n") != 2 || !strings.HasSuffix(got, "\n") {
		t.Errorf("want one finished line per step:\n%q", got)
	}
	// Nobody watching: a nil step takes every call.
	var none backend.Options
	none.Begin("x", "").Update(1, 2)
	none.Begin("x", "").End(nil)
}

// Only a terminal gets progress: a pipe or a file gets nothing.
func TestProgressOnlyOnATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if terminalProgress(w) != nil {
		t.Error("a pipe is taken for a terminal")
	}
}
