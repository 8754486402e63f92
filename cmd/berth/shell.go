package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

func newShellCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "shell [flags]",
		Short: "Run commands in one persistent session",
		Long: `Open a session in the configured environment. On a terminal it is an
interactive prompt (Ctrl-C interrupts the running command, Ctrl-D ends the
session). With stdin not a terminal it reads one command per line and runs
them in order in the same session; --json prints one result object per line
(JSON Lines).`,
		Example: `  berth shell
  printf 'cd /tmp\nexport A=1\necho $A; pwd\n' | berth shell --json
  berth shell --backend ssh --task gpu < script.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			interactive := isTerminal(os.Stdin)
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
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

// batchShell runs one command per input line in one session.
func batchShell(ctx context.Context, m *manager.Manager, c *common, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	last := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
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
		if res.Error != nil {
			last = errorStatus
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read commands: %w", err)
	}
	if last != 0 {
		return exitError{last}
	}
	return nil
}

// interactiveShell is a prompt loop; Ctrl-C interrupts the running command
// instead of ending berth (the parent context, cancelled by the first
// signal, is deliberately not consulted).
func interactiveShell(parent context.Context, m *manager.Manager, c *common) error {
	cfg := m.Config()
	env, err := m.Env(parent, c.task)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "berth %s (task %s). Ctrl-D to leave.\n", cfg.Terminal.Backend, c.task)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	in := bufio.NewReader(os.Stdin)
	for {
		cwd := env.Session().Cwd()
		fmt.Fprintf(os.Stderr, "berth %s:%s$ ", cfg.Terminal.Backend, cwd)
		line, err := in.ReadString('\n')
		if err != nil {
			fmt.Fprintln(os.Stderr)
			return nil
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			select {
			case <-sigs:
				cancel()
			case <-done:
			}
		}()
		res := m.Run(ctx, c.task, terminal.Request{Command: strings.TrimRight(line, "\n"), Timeout: c.timeout, Workdir: c.workdir})
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
	}
}
