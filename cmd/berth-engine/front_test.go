package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// frontAlone is a copy of the berth front binary in a directory of its
// own, with no runnable berth-engine next to it or on PATH: whatever it
// answers, it answered without the engine. Next to it lies the engine's
// head only (its first 64 KiB, which hold the build ID the front names the
// daemon's socket by) with its ELF magic cleared, which the front cannot
// exec; with stub false,
// nothing lies there.
func frontAlone(t *testing.T, stub bool) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "berth")
	if err := copyFile(berthBin, p, 0o755); err != nil {
		t.Fatal(err)
	}
	if stub {
		// Only the head is read: a whole binary in this process's memory
		// would show in the peak RSS other tests measure.
		f, err := os.Open(filepath.Join(filepath.Dir(berthBin), "berth-engine"))
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 64<<10)
		_, err = io.ReadFull(f, head)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		copy(head, "\x00\x00\x00\x00") // no ELF magic: execve fails
		if err := os.WriteFile(filepath.Join(dir, "berth-engine"), head, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// runAlone runs the lone front with d's environment and a PATH without
// the engine.
func (d *daemonEnv) runAlone(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append([]string{}, d.env...), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestFrontAnswersWarmExecAlone: once the daemon holds an environment, the
// light berth front runs `berth exec` itself (the example, JSON
// results, exit statuses, the approval floor), and hands over to the
// engine, before running anything, whatever it cannot answer: another
// command, a configuration that turns the daemon off, a timeout berth
// refuses.
func TestFrontAnswersWarmExecAlone(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "t", "--", "cd /tmp; export A=1")
	front := frontAlone(t, true)

	out, errs, code := d.runAlone(t, front, "exec", "--task", "t", "--", "echo $A; pwd")
	if code != 0 || out != "1\n/tmp\n" {
		t.Fatalf("front exec: exit %d, stdout %q, stderr %q; want 0 and \"1\\n/tmp\\n\"", code, out, errs)
	}
	out, errs, code = d.runAlone(t, front, "exec", "--task", "t", "--json", "--", "echo hi; exit 7")
	if code != 7 || !strings.HasPrefix(out, `{"output":"hi","exit_code":7,"error":null`) {
		t.Fatalf("front exec --json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// The same line through the engine prints the same bytes.
	eout, _, ecode := d.run(t, "", "exec", "--no-daemon", "--json", "--", "echo hi; exit 7")
	if ecode != 7 || eout != out {
		t.Fatalf("engine --no-daemon --json: exit %d, %q; the front printed %q", ecode, eout, out)
	}
	// Trailing blank lines are trimmed as in one process.
	line := `printf 'a\n\n'; printf ' \n\n'`
	out, errs, code = d.runAlone(t, front, "exec", "--task", "t", "--", line)
	if eout, _, _ := d.run(t, "", "exec", "--no-daemon", "--", line); code != 0 || out != "a\n" || eout != out {
		t.Fatalf("trailing blank lines: front printed %q (exit %d, stderr %q), one process %q; want \"a\\n\" from both", out, code, errs, eout)
	}
	_, errs, code = d.runAlone(t, front, "exec", "--task", "t", "--", "rm -rf /")
	if code != blockedStatus || !strings.Contains(errs, "BLOCKED: ") {
		t.Fatalf("front exec of the floor: exit %d, stderr %q; want %d and BLOCKED", code, errs, blockedStatus)
	}

	// Handed over, so refused here for want of the engine, with nothing
	// run.
	marker := filepath.Join(t.TempDir(), "ran")
	off := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(off, []byte("terminal:\n  daemon: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"daemon", "status"},
		{"exec", "--config", off, "--", "touch " + marker},
		{"exec", "--timeout", "100000", "--", "touch " + marker},
		{"exec", "--no-daemon", "--", "touch " + marker},
		{"exec", "-v", "--", "touch " + marker},
	} {
		_, errs, code := d.runAlone(t, front, args...)
		if code != errorStatus || !strings.Contains(errs, "berth-engine: exec format error") {
			t.Errorf("lone front %q: exit %d, stderr %q; want %d and the engine stub's exec failure", args, code, errs, errorStatus)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("lone front %q ran the command before handing it over", args)
		}
	}
	// With the engine there, the same calls are served: the daemon-off
	// configuration in one process, the bad timeout refused.
	d.mustRun(t, 0, "exec", "--config", off, "--", "touch "+marker)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("exec with terminal.daemon false did not run: %v", err)
	}
	_, errs, code = d.run(t, "", "exec", "--timeout", "100000", "--", "echo ran")
	if code != errorStatus || !strings.Contains(errs, "at most 86400") {
		t.Fatalf("--timeout 100000: exit %d, stderr %q", code, errs)
	}
}

// TestFrontWithoutDaemonNeedsEngine: without an engine the front answers
// nothing (it names its daemon after the engine's build), even with a
// daemon running; it says where it looked and how to fix it.
func TestFrontWithoutDaemonNeedsEngine(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--", "true")
	front := frontAlone(t, false)
	_, errs, code := d.runAlone(t, front, "exec", "--", "true")
	if code != errorStatus || !strings.Contains(errs, "cannot find berth-engine") || !strings.Contains(errs, filepath.Dir(front)) || !strings.Contains(errs, "go install") {
		t.Fatalf("lone front, no daemon: exit %d, stderr %q", code, errs)
	}
}
