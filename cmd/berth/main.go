// Command berth runs an AI agent's shell commands in a configured
// environment — this machine, a hardened Docker container, a remote host
// over SSH, an Apptainer instance, a Modal or Daytona sandbox — through
// one persistent shell per environment.
//
// This binary is berth's light front: a `berth exec` whose environment the
// berth daemon already holds warm is answered here, in a few milliseconds
// (it links neither the backends nor the configuration loader). Every
// other call, and any exec it cannot answer for certain before anything
// runs (no daemon yet, --no-daemon, a terminal that may be asked an
// approval question, flags it does not read as the engine would, a
// configuration that turns the daemon off), is handed to the full
// berth-engine binary, which takes this process's place (exec, same pid)
// with the same arguments. It links neither pflag nor package net, so it
// starts without the C library.
//
// The front talks only to the daemon of the engine it would exec (the
// socket is named after that engine's build, wire.EngineIdentity), and
// execs only an engine of its own build: it passes its build in
// BERTH_FRONT_BUILD, and an engine of another build refuses to run.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/a55dbaac/berth/cmd/internal/cli"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/berthhome"
)

// engineName is the full binary's file name, looked for next to this one,
// then on PATH.
const engineName = "berth-engine"

func main() {
	// Before anything else: the environment holds the caller's secrets.
	if err := cli.Harden(); err != nil {
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(cli.StatusError)
	}
	engine, engineErr := findEngine()
	if engineErr == nil {
		if code, ok := quickExec(os.Args[1:], engine); ok {
			os.Exit(code)
		}
	}
	if engineErr != nil {
		fmt.Fprintln(os.Stderr, "berth:", engineErr)
		os.Exit(cli.StatusError)
	}
	env := append(os.Environ(), wire.FrontBuildEnv+"="+wire.Build())
	err := syscall.Exec(engine, append([]string{os.Args[0]}, os.Args[1:]...), env)
	fmt.Fprintf(os.Stderr, "berth: run %s: %v\n", engine, err)
	os.Exit(cli.StatusError)
}

// quickExec answers `berth exec` through a running daemon of engine's
// build. It reports false, having run nothing, when the call is for the
// engine.
func quickExec(args []string, engine string) (int, bool) {
	if len(args) == 0 || args[0] != "exec" {
		return 0, false
	}
	f, command, ok := cli.ParseExec(args[1:])
	if !ok || f.NoDaemon || len(command) == 0 || cli.DaemonOffInEnv() {
		return 0, false
	}
	// A human at a terminal may be asked an approval question: the
	// engine has the prompt.
	if cli.IsTerminal(os.Stdin) && cli.IsTerminal(os.Stderr) {
		return 0, false
	}
	home, err := berthhome.Dir(nil)
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := wire.Dial(ctx, wire.DialOptions{Home: home, Identity: wire.EngineIdentity(engine), NoStart: true})
	if err != nil {
		return 0, false
	}
	defer cl.Close()
	in, err := f.Inputs()
	if err != nil {
		return 0, false
	}
	cli.HandleSignals(cancel)
	req := f.Request(wire.OpRun, in, "", false)
	req.Quick = true
	req.Command = strings.Join(command, " ")
	code, err := cli.Exec(ctx, cl, req, f.JSON, nil, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, cli.ErrFallback):
		return 0, false
	case err != nil:
		fmt.Fprintln(os.Stderr, "berth:", err)
		return cli.StatusError, true
	}
	return code, true
}

// findEngine returns the berth-engine binary next to this executable, or
// on PATH.
func findEngine() (string, error) {
	self, err := os.Executable()
	if err == nil {
		if p := filepath.Join(filepath.Dir(self), engineName); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(engineName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("cannot find %s (looked next to %s and on PATH): berth needs it for everything but a warm exec; build both with `go build -o DIR ./cmd/...` or install both with `go install github.com/a55dbaac/berth/cmd/...@latest`", engineName, self)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
