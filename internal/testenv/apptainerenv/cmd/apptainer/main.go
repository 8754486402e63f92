package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// version is what `apptainer version` prints. The numbers follow the real
// Apptainer the stand-in was checked against (1.5.3); the build metadata
// says that this is not it.
const version = "1.5.3+berth.standin"

// Internal entry points. They are argv[1] values (or argv[0] for appinit)
// that only the stand-in itself passes; a user never types them.
const (
	cmdMonitor = "__berth_standin_monitor" // host side of a running instance
	cmdEnter   = "__berth_standin_enter"   // runs inside the container, then execs the command
	cmdAppinit = "appinit"                 // PID 1 of an instance
	cmdStage   = "__berth_standin_stage"   // sets up the root of a one-shot `exec IMAGE`
)

// globals holds the global options given before the command.
type globals struct {
	silent bool   // -s: only errors
	quiet  bool   // -q: no INFO
	debug  bool   // -d: accepted, ignored
	config string // -c: apptainer.conf to read
}

var g globals

func main() {
	if filepath.Base(os.Args[0]) == cmdAppinit {
		os.Exit(appinitMain())
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case cmdAppinit:
			// First hop inside the container: bwrap started us as
			// /proc/self/fd/N; re-exec so /proc/1/cmdline reads "appinit".
			os.Exit(appinitReexec())
		case cmdMonitor:
			os.Exit(monitorMain())
		case cmdEnter:
			os.Exit(enterMain(os.Args[2:]))
		case cmdStage:
			os.Exit(stageMain(os.Args[2:]))
		}
	}
	os.Exit(run(os.Args[1:]))
}

// exitError carries an exit status out of a command; the message (if any)
// was already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// fatalError is printed as "FATAL:   <msg>" and exits 255, like sylog.Fatalf.
type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }

func fatalf(format string, args ...any) error {
	return fatalError{msg: fmt.Sprintf(format, args...)}
}

// usageError reproduces cobra's argument errors as Apptainer shows them:
// the usage line on stdout, `Error for command "<cmd>": <msg>` and a blank
// line on stderr, exit status 1.
type usageError struct {
	cmd   string // the cobra command name ("stop")
	usage string // the Use line after "apptainer [global options...] "
	msg   string
}

func (e usageError) Error() string { return e.msg }

func run(args []string) int {
	err := dispatch(args)
	return report(err)
}

// report prints err the way Apptainer does and returns the exit status.
func report(err error) int {
	var fe fatalError
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &fe):
		fatalLine(fe.msg)
		return 255
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stdout, "Usage:\n  apptainer [global options...] %s\n\nRun 'apptainer --help' for more detailed usage information.\n", ue.usage)
		fmt.Fprintf(os.Stderr, "Error for command %q: %s\n\n", ue.cmd, ue.msg)
		return 1
	default:
		fatalLine(err.Error())
		return 255
	}
}

// Log lines: the level, a colon and padding to nine columns, as sylog
// prints them when stderr is not a terminal.
func logLine(w io.Writer, level, msg string) {
	fmt.Fprintf(w, "%-9s%s\n", level+":", msg)
}

func infof(format string, args ...any) {
	if g.silent || g.quiet {
		return
	}
	logLine(os.Stderr, "INFO", fmt.Sprintf(format, args...))
}

func warnf(format string, args ...any) {
	if g.silent {
		return
	}
	logLine(os.Stderr, "WARNING", fmt.Sprintf(format, args...))
}

func errorf(format string, args ...any) {
	logLine(os.Stderr, "ERROR", fmt.Sprintf(format, args...))
}

func fatalLine(msg string) { logLine(os.Stderr, "FATAL", msg) }

// dispatch parses the global options and runs the command.
func dispatch(args []string) error {
	fs := pflag.NewFlagSet("apptainer", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	fs.BoolVarP(&g.silent, "silent", "s", false, "only print errors")
	fs.BoolVarP(&g.quiet, "quiet", "q", false, "suppress normal output")
	fs.BoolVarP(&g.debug, "debug", "d", false, "print debugging information")
	verbose := fs.BoolP("verbose", "v", false, "print additional information")
	fs.Bool("nocolor", false, "print without color output")
	fs.StringVarP(&g.config, "config", "c", "", "specify a configuration file")
	showVersion := fs.Bool("version", false, "version for apptainer")
	help := fs.BoolP("help", "h", false, "help for apptainer")
	if err := fs.Parse(args); err != nil {
		return usageError{cmd: "apptainer", usage: "<command>", msg: err.Error()}
	}
	_ = verbose
	if *showVersion {
		fmt.Printf("apptainer version %s\n", version)
		return nil
	}
	rest := fs.Args()
	if *help || len(rest) == 0 {
		fmt.Println("Usage:\n  apptainer [global options...] <command>\n\nAvailable Commands:\n  build, exec, instance, overlay, version\n\n(berth's stand-in for Apptainer: see its package documentation)")
		return nil
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "version":
		fmt.Println(version)
		return nil
	case "build":
		return buildCmd(rest)
	case "exec":
		return execCmd(rest)
	case "instance":
		if len(rest) == 0 {
			return usageError{cmd: "instance", usage: "instance <subcommand>", msg: "requires a subcommand"}
		}
		switch rest[0] {
		case "start":
			return instanceStartCmd(rest[1:])
		case "stop":
			return instanceStopCmd(rest[1:])
		case "list":
			return instanceListCmd(rest[1:])
		}
		return usageError{cmd: "instance", usage: "instance <subcommand>", msg: fmt.Sprintf("unknown command %q for \"apptainer instance\"", rest[0])}
	case "overlay":
		if len(rest) > 0 && rest[0] == "create" {
			return overlayCreateCmd(rest[1:])
		}
		return usageError{cmd: "overlay", usage: "overlay create [create options...] <path to image>", msg: "requires a subcommand"}
	}
	return usageError{cmd: "apptainer", usage: "<command>", msg: fmt.Sprintf("unknown command %q for \"apptainer\"", cmd)}
}

// flagErr turns a pflag parse error into cobra's usage error.
func flagErr(cmd, usage string, err error) error {
	return usageError{cmd: cmd, usage: usage, msg: err.Error()}
}

// newFlagSet makes a FlagSet that reports errors instead of printing them.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolP("help", "h", false, "help")
	return fs
}

// envString reads APPTAINER_<KEY> (else SINGULARITY_<KEY>), the way
// Apptainer lets its flags and directories be set from the environment.
func envString(key string) string {
	for _, p := range []string{"APPTAINER_", "SINGULARITY_"} {
		if v, ok := os.LookupEnv(p + key); ok {
			return v
		}
	}
	return ""
}

// envBool is envString read as a boolean flag default.
func envBool(key string) bool {
	switch strings.ToLower(envString(key)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
