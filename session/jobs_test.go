package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/session"
)

// TestHasJobs: a job still running counts, a finished one does not (bash
// keeps it in jobs -p until it has reported it Done, which would keep an
// environment from ever being swept), on bash and on POSIX sh.
func TestHasJobs(t *testing.T) {
	for _, tc := range []struct {
		name string
		be   func(t *testing.T) backend.Backend
	}{
		{"bash", func(t *testing.T) backend.Backend { return newLocal(t, t.TempDir()) }},
		{"sh", func(t *testing.T) backend.Backend { return noBash{newLocal(t, t.TempDir())} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := session.New(tc.be(t), session.Options{Grace: 300 * time.Millisecond})
			defer s.Close()
			ctx := context.Background()
			runOut(t, s, session.Request{Command: "true"})
			if s.HasJobs(ctx) {
				t.Fatal("HasJobs before any job")
			}
			runOut(t, s, session.Request{Command: "sleep 0.2 &"})
			if !s.HasJobs(ctx) {
				t.Fatal("HasJobs false while a job runs")
			}
			runOut(t, s, session.Request{Command: "sleep 0.5"})
			if s.HasJobs(ctx) {
				t.Fatal("HasJobs true after the job finished")
			}
		})
	}
}
