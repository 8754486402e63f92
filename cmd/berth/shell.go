package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

func newShellCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "shell [flags]",
		Short: "Run commands in one persistent session",
		Long: `Open a session in the configured environment. On a terminal it is an
interactive prompt (Ctrl-C interrupts the running command, Ctrl-D ends the
session); a command that needs approval (see approvals.mode) asks there:
once, session, always (saved into command_allowlist) or deny. With stdin not
a terminal it reads one command per line and runs them in order in the same
session, and such commands are refused ("BLOCKED: ..."); --json prints one
result object per line (JSON Lines).

Background processes (the agent's process tool) are reached with lines that
start with a colon:
  :bg COMMAND          start COMMAND in the background (:bgpty with a terminal)
  :ps                  list background processes
  :poll ID | :log ID | :wait ID [SECONDS] | :kill ID
  :write ID DATA | :submit ID DATA | :close ID
IDs may be any unique prefix of 4 or more characters.`,
		Example: `  berth shell
  printf 'cd /tmp\nexport A=1\necho $A; pwd\n' | berth shell --json
  berth shell --backend ssh --task gpu < script.txt
  printf ':bg sleep 2; echo done\n:ps\n' | berth shell --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			interactive := isTerminal(os.Stdin)
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				m.StartSweeper(ctx)
				if interactive {
					return interactiveShell(ctx, m, &c)
				}
				return batchShell(ctx, m, &c, os.Stdin, os.Stdout)
			})
		},
	}
	c.addRunFlags(cmd)
	return cmd
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// readLines delivers input lines on a channel so callers can stop waiting
// for input when berth is told to shut down.
func readLines(in io.Reader) (<-chan string, <-chan error) {
	lines := make(chan string)
	errc := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		errc <- sc.Err()
	}()
	return lines, errc
}

// batchShell runs one command per input line in one session.
func batchShell(ctx context.Context, m *manager.Manager, c *common, in io.Reader, out io.Writer) error {
	lines, errc := readLines(in)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	last := 0
	for {
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-ctx.Done():
			return exitError{130}
		}
		if !ok {
			break
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if meta, ok := metaCommand(ctx, m, c, line); ok {
			if err := printMeta(out, meta, c.jsonOut); err != nil {
				return err
			}
			continue
		}
		res := m.Run(ctx, c.task, terminal.Request{Command: line, Timeout: c.timeout, Workdir: c.workdir})
		if c.jsonOut {
			if err := enc.Encode(res); err != nil {
				return err
			}
		} else {
			if res.Output != "" {
				fmt.Fprintln(out, res.Output)
			}
			if res.Error != nil {
				fmt.Fprintln(os.Stderr, "berth:", *res.Error)
			}
		}
		last = res.ExitCode
		switch {
		case res.Approval != nil && !res.Approval.Allowed():
			last = blockedStatus
		case res.Error != nil:
			last = errorStatus
		}
		if ctx.Err() != nil {
			return exitError{130}
		}
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("read commands: %w", err)
	}
	if last != 0 {
		return exitError{last}
	}
	return nil
}

// interactiveShell is a prompt loop. Ctrl-C interrupts the running command
// instead of ending berth; Ctrl-D, SIGTERM or SIGHUP end the session.
func interactiveShell(parent context.Context, m *manager.Manager, c *common) error {
	cfg := m.Config()
	env, err := m.Env(parent, c.task)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "berth %s (task %s). Ctrl-D to leave.\n", cfg.Terminal.Backend, c.task)
	interruptsClaimed.Store(true)
	defer interruptsClaimed.Store(false)
	lines, _ := readLines(os.Stdin)
	// A command that needs approval asks on this terminal, reading the
	// same lines as the prompt (never both at once: the loop waits for the
	// command while the question is open).
	parent = approval.WithAsker(parent, approval.NewLinePromptAsker(lines, os.Stderr))
	for {
		fmt.Fprintf(os.Stderr, "berth %s:%s$ ", cfg.Terminal.Backend, env.Session().Cwd())
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-interrupts:
			fmt.Fprintln(os.Stderr)
			continue
		case <-parent.Done():
			fmt.Fprintln(os.Stderr)
			return nil
		}
		if !ok {
			fmt.Fprintln(os.Stderr)
			return nil
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if meta, ok := metaCommand(parent, m, c, line); ok {
			printMeta(os.Stdout, meta, false)
			continue
		}
		ctx, cancel := context.WithCancel(parent)
		done := make(chan struct{})
		go func() {
			select {
			case <-interrupts:
				cancel()
			case <-done:
			}
		}()
		res := m.Run(ctx, c.task, terminal.Request{Command: line, Timeout: c.timeout, Workdir: c.workdir})
		close(done)
		cancel()
		if res.Output != "" {
			fmt.Println(res.Output)
		}
		if res.Error != nil {
			fmt.Fprintln(os.Stderr, "berth:", *res.Error)
		} else if res.ExitCode != 0 {
			fmt.Fprintf(os.Stderr, "[exit %d", res.ExitCode)
			if res.ExitCodeMeaning != "" {
				fmt.Fprintf(os.Stderr, ": %s", res.ExitCodeMeaning)
			}
			fmt.Fprintln(os.Stderr, "]")
		}
		if parent.Err() != nil {
			return nil
		}
	}
}

// metaCommand runs a ":verb ..." line against the process tool. It reports
// false for lines that are ordinary shell commands.
func metaCommand(ctx context.Context, m *manager.Manager, c *common, line string) (any, bool) {
	if !strings.HasPrefix(line, ":") {
		return nil, false
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(line[1:]), " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "bg", "bgpty":
		return m.Background(ctx, c.task, terminal.Request{Command: rest, Workdir: c.workdir, PTY: verb == "bgpty"}), true
	case "ps":
		return m.Process(ctx, c.task, process.Request{Action: "list"}), true
	case "poll", "log", "kill", "close":
		return m.Process(ctx, c.task, process.Request{Action: verb, SessionID: rest}), true
	case "wait":
		id, secs, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(strings.TrimSpace(secs))
		return m.Process(ctx, c.task, process.Request{Action: "wait", SessionID: id, Timeout: n}), true
	case "write", "submit":
		id, data, _ := strings.Cut(rest, " ")
		return m.Process(ctx, c.task, process.Request{Action: verb, SessionID: id, Data: data}), true
	}
	return nil, false
}

func printMeta(out io.Writer, v any, asJSON bool) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if !asJSON {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}
