package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/backend"
)

// terminalProgress returns a reporter that draws the backends' long set-up
// steps on f, one line per step rewritten in place, when f is a terminal;
// nil (nobody watching, nothing drawn) otherwise: a pipe, a log file or an
// MCP client's stderr gets none of it.
func terminalProgress(f *os.File) func(backend.Event) {
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return newProgressLine(f, 100*time.Millisecond).show
}

// progressLine draws Events on one terminal line.
type progressLine struct {
	w     io.Writer
	every time.Duration // at most one redraw per step this often

	mu   sync.Mutex
	last time.Time
}

func newProgressLine(w io.Writer, every time.Duration) *progressLine {
	return &progressLine{w: w, every: every}
}

// show draws ev: a step's start and end always, its updates at most once
// per p.every; the end leaves one line saying how it went.
func (p *progressLine) show(ev backend.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	update := !ev.End && (ev.Done > 0 || ev.Total > 0)
	if now := time.Now(); update {
		if now.Sub(p.last) < p.every {
			return
		}
		p.last = now
	} else {
		p.last = time.Time{} // a step's first update is always drawn
	}
	line := "berth: " + ev.Step
	switch {
	case ev.End && ev.Err != nil:
		line += fmt.Sprintf(": failed after %s", ev.Elapsed.Round(100*time.Millisecond))
	case ev.End:
		line += fmt.Sprintf(": done in %s", ev.Elapsed.Round(100*time.Millisecond))
	case ev.Done > 0 || ev.Total > 0:
		line += ": " + amount(ev.Done, ev.Unit)
		if ev.Total > 0 {
			line += fmt.Sprintf(" of %s (%d%%)", amount(ev.Total, ev.Unit), ev.Done*100/ev.Total)
		}
	default:
		line += " ..."
	}
	// \r and erase-line: each redraw replaces the line; the end moves on.
	end := ""
	if ev.End {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s%s", line, end)
}

// amount shows n in unit: bytes in MiB, anything else as a count.
func amount(n int64, unit string) string {
	if unit == "bytes" {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	if unit == "" {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d %s", n, unit)
}
