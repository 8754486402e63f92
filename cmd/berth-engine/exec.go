package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/cmd/internal/cli"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/daemon/wire"
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
call with the same --task, the output streams as it comes (a line's end is
printed when more output follows, so that trailing blank lines are trimmed
as in one process), and Ctrl-C interrupts the command only. The environment
starts where the call that created it runs; a call whose settings differ
(backend, image, ...) gets a new environment, with a note on stderr. --no-daemon runs in this process, as one call.`,
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
			line := strings.Join(args, " ")
			var res terminal.Result
			code := -1
			err = withRunner(cmd.Context(), cfg, &c, func(ctx context.Context, r runner) error {
				if cli.IsTerminal(os.Stdin) && cli.IsTerminal(os.Stderr) {
					r.setAsker(approval.NewPromptAsker(os.Stdin, os.Stderr))
				}
				switch r := r.(type) {
				case *daemonRunner:
					code, err = r.exec(ctx, line, c.JSON)
					return err
				case *localRunner:
					r.oneShot = true
				}
				var out io.Writer
				if !c.JSON {
					out = os.Stdout
				}
				res, err = r.run(ctx, line, out)
				return err
			})
			if err != nil {
				return err
			}
			if code < 0 {
				code = resultStatus(res, c.JSON)
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	c.addRunFlags(cmd)
	c.addDaemonFlag(cmd)
	return cmd
}

// addDaemonFlag adds --no-daemon.
func (c *common) addDaemonFlag(cmd *cobra.Command) { flagset.AddNoDaemon(cmd.Flags(), &c.Flags) }

// resultStatus prints the JSON of a foreground result run in this process
// (the output itself was printed) and returns berth exec's exit status,
// printing why the command did not run, as the daemon path does.
func resultStatus(res terminal.Result, asJSON bool) int {
	code, msg := res.ExitStatus()
	if asJSON {
		b, err := wire.MarshalJSON(res)
		if err == nil {
			_, err = fmt.Printf("%s\n", b)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "berth:", err)
			return errorStatus
		}
	} else if msg != "" {
		fmt.Fprintln(os.Stderr, "berth:", msg)
	}
	return code
}
