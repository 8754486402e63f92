package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

func newExecCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "exec [flags] -- COMMAND...",
		Short: "Run one command through the configured backend",
		Long: `Run one shell command in the configured environment and print its output
(stdout and stderr merged, cleaned and truncated as the agent would see it).
berth exits with the command's exit status: 124 when it timed out, 130 when
interrupted, 126 when berth's approval check refused to run it (the hardline
floor, approvals.deny, or a dangerous command nobody approved), and 125 when
berth itself failed (bad flags, unreachable backend). Several arguments are
joined with spaces, as ssh does.

A command that needs approval (see approvals.mode) is asked about on the
terminal when stdin and stderr are one; otherwise it is refused with a
message starting "BLOCKED:" that says how to allow it.`,
		Example: `  berth exec -- uname -a
  berth exec --timeout 2 -- 'sleep 100 & sleep 100'
  berth exec --backend docker --task build -- 'cd /workspace && make'
  berth exec --json -- 'ls /nope'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			req := terminal.Request{Command: strings.Join(args, " "), Timeout: c.timeout, Workdir: c.workdir}
			var res terminal.Result
			err = withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				if isTerminal(os.Stdin) && isTerminal(os.Stderr) {
					ctx = approval.WithAsker(ctx, approval.NewPromptAsker(os.Stdin, os.Stderr))
				}
				res = m.Run(ctx, c.task, req)
				return nil
			})
			if err != nil {
				return err
			}
			return printResult(res, c.jsonOut)
		},
	}
	c.addRunFlags(cmd)
	return cmd
}

// blockedStatus is berth's exit status for a command its approval check
// refused to run (the shell's "cannot execute").
const blockedStatus = 126

// printResult prints a foreground result and turns its status into berth's
// exit status.
func printResult(res terminal.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if res.Output != "" {
		fmt.Println(res.Output)
	}
	if res.Approval != nil && !res.Approval.Allowed() {
		if !asJSON {
			fmt.Fprintln(os.Stderr, "berth:", res.Approval.Message)
		}
		return exitError{blockedStatus}
	}
	if res.Error != nil {
		if asJSON {
			return exitError{errorStatus}
		}
		return errors.New(*res.Error)
	}
	if res.ExitCode != 0 {
		code := res.ExitCode
		if code < 0 || code > 255 {
			code = errorStatus
		}
		return exitError{code}
	}
	return nil
}
