package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
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
message starting "BLOCKED:" that says how to allow it.

Calls run through a background berth that keeps each task's environment
warm (see "berth daemon"): cd and exported variables carry over to the next
call with the same --task, the output streams as it comes (a line is shown
once the next one starts, or at the end), and Ctrl-C interrupts the command
only. The environment starts where the call that created it runs; a call
whose settings differ (backend, image, ...) gets a new environment, with a
note on stderr. --no-daemon runs in this process, as one call.`,
		Example: `  berth exec -- uname -a
  berth exec --timeout 2 -- 'sleep 100 & sleep 100'
  berth exec --backend docker --task build -- 'cd /workspace && make'
  berth exec --json -- 'ls /nope'
  berth exec --task t -- 'cd /tmp; export A=1' && berth exec --task t -- 'echo $A; pwd'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			var res terminal.Result
			err = withRunner(cmd.Context(), cfg, &c, func(ctx context.Context, r runner) error {
				if lr, ok := r.(*localRunner); ok {
					lr.oneShot = true
				}
				if isTerminal(os.Stdin) && isTerminal(os.Stderr) {
					r.setAsker(approval.NewPromptAsker(os.Stdin, os.Stderr))
				}
				var out io.Writer
				if !c.jsonOut {
					out = os.Stdout
				}
				res, err = r.run(ctx, strings.Join(args, " "), out)
				return err
			})
			if err != nil {
				return err
			}
			return resultStatus(res, c.jsonOut)
		},
	}
	c.addRunFlags(cmd)
	c.addDaemonFlag(cmd)
	return cmd
}

// addDaemonFlag adds --no-daemon.
func (c *common) addDaemonFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.noDaemon, "no-daemon", false, "run in this process instead of the background berth that keeps environments warm (also BERTH_NO_DAEMON=1, terminal.daemon: false)")
}

// blockedStatus is berth's exit status for a command its approval check
// refused to run (the shell's "cannot execute").
const blockedStatus = 126

// movedStatus is berth exec's status when the command was still running at
// its timeout and was moved to the background (on_timeout: background,
// through the daemon): the timeout's status, though the command goes on.
const movedStatus = 124

// resultStatus prints the JSON of a foreground result (the output itself
// was printed as it came) and turns its status into berth's exit status.
func resultStatus(res terminal.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	if res.Approval != nil && !res.Approval.Allowed() {
		if !asJSON {
			fmt.Fprintln(os.Stderr, "berth:", res.Approval.Message)
		}
		return exitError{blockedStatus}
	}
	if res.MovedToBackground {
		return exitError{movedStatus}
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
