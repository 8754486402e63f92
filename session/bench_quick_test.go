package session_test

import (
	"context"
	"io"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/session"
)

func TestLatencyQuick(t *testing.T) {
	be, _ := local.New(backend.Options{})
	s := session.New(be, session.Options{})
	defer s.Close()
	var d []time.Duration
	for i := 0; i < 500; i++ {
		st := time.Now()
		s.Run(context.Background(), session.Request{Command: "true"}, io.Discard)
		d = append(d, time.Since(st))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	t.Logf("session p50 %v p90 %v", d[250], d[450])
	d = d[:0]
	for i := 0; i < 100; i++ {
		st := time.Now()
		exec.Command("bash", "-c", "true").Run()
		d = append(d, time.Since(st))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	t.Logf("spawn p50 %v p90 %v", d[50], d[90])
}
