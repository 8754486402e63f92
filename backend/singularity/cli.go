package singularity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// cli runs the apptainer (or singularity) executable for management
// commands: version, build, instance start/stop/list, overlay create. Every
// process of the environment goes through hostproc instead.
type cli struct {
	bin string
	env []string // extra variables for every call (none by default)
}

// cliError is a failed management command with what it printed.
type cliError struct {
	args   []string
	code   int
	stderr string
	err    error
}

func (e *cliError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = e.err.Error()
	}
	return fmt.Sprintf("%s: %s", strings.Join(e.args, " "), msg)
}

func (e *cliError) Unwrap() error { return e.err }

// fatal returns the FATAL/ERROR lines Apptainer printed, joined, without
// the level prefixes or colour codes: the part worth showing a user.
func (e *cliError) fatal() string {
	var out []string
	for _, l := range strings.Split(stripANSI(e.stderr), "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"FATAL:", "ERROR:", "ERROR  :"} {
			if rest, ok := strings.CutPrefix(l, p); ok {
				out = append(out, strings.TrimSpace(rest))
			}
		}
	}
	if len(out) == 0 {
		return strings.TrimSpace(e.stderr)
	}
	// The starter's wrapper line and the clean-up echo repeat the cause.
	var cause []string
	for _, l := range out {
		if !strings.HasPrefix(l, "while executing starter: failed to start instance") && !strings.HasPrefix(l, "container cleanup failed") {
			cause = append(cause, l)
		}
	}
	if len(cause) == 0 {
		cause = out
	}
	return strings.Join(cause, "; ")
}

// stripANSI removes the colour escapes the C starter prints even into pipes.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs one management command and returns its stdout.
func (c *cli) run(ctx context.Context, extraEnv []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(append(hostEnv(os.Environ(), false), c.env...), extraEnv...)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		ce := &cliError{args: append([]string{c.bin}, args...), stderr: errb.String(), err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ce.code = ee.ExitCode()
		}
		if ctx.Err() != nil {
			ce.err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return out.String(), ce
	}
	return out.String(), nil
}

// runStreaming runs a long management command (build), handing every line
// it prints on stderr to line as it comes, and keeps the tail for errors.
func (c *cli) runStreaming(ctx context.Context, extraEnv []string, line func(string), args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(append(hostEnv(os.Environ(), true), c.env...), extraEnv...)
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return &cliError{args: append([]string{c.bin}, args...), err: err}
	}
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := stripANSI(sc.Text())
			line(l)
			tail = append(tail, l)
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		ce := &cliError{args: append([]string{c.bin}, args...), stderr: strings.Join(tail, "\n"), err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ce.code = ee.ExitCode()
		}
		return ce
	}
	return nil
}

// version returns `apptainer version` (e.g. "1.3.4" or "4.1.0" for
// SingularityCE).
func (c *cli) version(ctx context.Context) (string, error) {
	out, err := c.run(ctx, nil, "version")
	return strings.TrimSpace(out), err
}

// instanceInfo is one entry of `instance list --json`.
type instanceInfo struct {
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
	Img      string `json:"img"`
}

// list returns the running instances whose names match pattern (a glob).
func (c *cli) list(ctx context.Context, pattern string) ([]instanceInfo, error) {
	out, err := c.run(ctx, nil, "instance", "list", "--json", pattern)
	if err != nil {
		return nil, fmt.Errorf("singularity: list instances: %w", err)
	}
	var l struct {
		Instances []instanceInfo `json:"instances"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("singularity: parse `instance list --json` output %q: %w", out, err)
	}
	return l.Instances, nil
}

// find returns the running instance name, or nil.
func (c *cli) find(ctx context.Context, name string) (*instanceInfo, error) {
	l, err := c.list(ctx, name)
	if err != nil {
		return nil, err
	}
	for i := range l {
		if l[i].Instance == name {
			return &l[i], nil
		}
	}
	return nil, nil
}

// stop stops the instance; an instance that is already gone is not an
// error.
func (c *cli) stop(ctx context.Context, name string) error {
	_, err := c.run(ctx, nil, "instance", "stop", "--timeout", "5", name)
	var ce *cliError
	if errors.As(err, &ce) && ce.code == 1 && strings.Contains(ce.stderr, "no instance found") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("singularity: stop instance %s: %w", name, err)
	}
	return nil
}
