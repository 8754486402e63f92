package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/cmd/internal/cli"
	"github.com/a55dbaac/berth/daemon/wire"
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
			interactive := cli.IsTerminal(os.Stdin)
			return withRunner(cmd.Context(), cfg, &c, func(ctx context.Context, r runner) error {
				if lr, ok := r.(*localRunner); ok {
					lr.m.StartSweeper(ctx)
				}
				if interactive {
					return interactiveShell(ctx, r, &c)
				}
				return batchShell(ctx, r, &c, os.Stdin, os.Stdout)
			})
		},
	}
	c.addRunFlags(cmd)
	c.addDaemonFlag(cmd)
	return cmd
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
func batchShell(ctx context.Context, r runner, c *common, in io.Reader, out io.Writer) error {
	lines, errc := readLines(in)
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
		meta, ok, err := r.meta(ctx, line)
		if err != nil {
			return err
		}
		if ok {
			if err := printMeta(out, meta, c.JSON); err != nil {
				return err
			}
			continue
		}
		var text io.Writer
		if !c.JSON {
			text = out
		}
		res, err := r.run(ctx, line, text)
		if err != nil {
			return err
		}
		if c.JSON {
			b, err := wire.MarshalJSON(res)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
				return err
			}
		} else if res.Error != nil {
			fmt.Fprintln(os.Stderr, "berth:", *res.Error)
		}
		// The last line's status, as berth exec's: 126 blocked, 125
		// berth's failure, 124 moved to the background.
		last, _ = res.ExitStatus()
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
func interactiveShell(parent context.Context, r runner, c *common) error {
	be, _, err := r.where(parent)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "berth %s (task %s). Ctrl-D to leave.\n", be, c.Task)
	cli.InterruptsClaimed.Store(true)
	defer cli.InterruptsClaimed.Store(false)
	lines, _ := readLines(os.Stdin)
	// A command that needs approval asks on this terminal, reading the
	// same lines as the prompt (never both at once: the loop waits for the
	// command while the question is open).
	r.setAsker(approval.NewLinePromptAsker(lines, os.Stderr))
	for {
		be, cwd, err := r.where(parent)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "berth %s:%s$ ", be, cwd)
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-cli.Interrupts:
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
		meta, ok, err := r.meta(parent, line)
		if err != nil {
			return err
		}
		if ok {
			printMeta(os.Stdout, meta, false)
			continue
		}
		ctx, cancel := context.WithCancel(parent)
		done := make(chan struct{})
		go func() {
			select {
			case <-cli.Interrupts:
				cancel()
			case <-done:
			}
		}()
		res, err := r.run(ctx, line, os.Stdout)
		close(done)
		cancel()
		if err != nil {
			return err
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

// printMeta prints a process-tool answer: one JSON line, or indented.
func printMeta(out io.Writer, v json.RawMessage, asJSON bool) error {
	var buf bytes.Buffer
	if asJSON {
		if err := json.Compact(&buf, v); err != nil {
			return err
		}
	} else if err := json.Indent(&buf, v, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := out.Write(buf.Bytes())
	return err
}
