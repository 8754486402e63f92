package floor

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/bench"
)

// localFloors: a bash started once with os/exec, commands written to its
// stdin over a pipe and the marker read back from its stdout, in the
// environment's working directory. Its start (fork, exec, the first
// answer) is the floor of a local environment ready.
func localFloors(l *local.Local) *Floors {
	dir := l.Dir()
	return &Floors{
		Stream:    "a bash kept open over pipes (os/exec)",
		StreamMax: 3,
		Shell:     func(ctx context.Context) (*bench.Shell, error) { return bashShell(dir) },
		Ready:     "a bash started over pipes, its first answer",
		ReadyStart: func(ctx context.Context) (Phases, error) {
			c := newClock()
			sh, err := bashShell(dir)
			if err != nil {
				return nil, err
			}
			defer sh.Close()
			c.mark("first answer")
			return c.ph, nil
		},
		Close: func() error { return nil },
	}
}

// bashShell starts bash in dir over pipes and waits for its first answer.
func bashShell(dir string) (*bench.Shell, error) {
	cmd := exec.Command("bash")
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("floor: bash: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("floor: bash: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("floor: bash: %w", err)
	}
	sh := bench.NewShell(in, out, func() error {
		in.Close()
		return cmd.Wait()
	})
	if err := sh.RoundTrip(); err != nil {
		sh.Close()
		return nil, fmt.Errorf("floor: bash: %w", err)
	}
	return sh, nil
}
