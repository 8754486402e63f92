package manager_test

import (
	"context"
	"fmt"
	"os"

	"github.com/a55dbaac/berth/approval"
	_ "github.com/a55dbaac/berth/backend/all" // registers local, docker, ssh, ...
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// Two commands in one environment: the second sees the cwd and the
// variable the first one set, and a failing command is a result, not an
// error.
func ExampleManager_Run() {
	ctx := context.Background()
	cfg := config.Default() // backend "local", home ~/.berth (or $BERTH_HOME), nothing read from files
	m := manager.New(cfg, nil)
	defer m.CloseAll(ctx)

	r1 := m.Run(ctx, "example", terminal.Request{Command: "cd /usr && export GREETING=hello"})
	r2 := m.Run(ctx, "example", terminal.Request{Command: `echo "$GREETING from $PWD"; grep -q nothing /dev/null`})
	if r2.Err != nil {
		fmt.Println("could not run:", r2.Err)
		return
	}
	fmt.Printf("cwd %s\n", r1.Cwd)
	fmt.Printf("%q exit %d (%s)\n", r2.Output, r2.ExitCode, r2.ExitCodeMeaning)
	// Output:
	// cwd /usr
	// "hello from /usr" exit 1 (no matches found (not an error))
}

// onceAsker is a user who allows every command they are asked about, once.
type onceAsker struct{}

func (onceAsker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	return approval.AnswerOnce, nil
}

// A command that needs the user's approval asks the call's asker, given
// as an option of the call; without one it is blocked.
func ExampleWithAsker() {
	ctx := context.Background()
	m := manager.New(config.Default(), nil)
	defer m.CloseAll(ctx)
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	cmd := terminal.Request{Command: "chmod -R u+rw " + dir}
	r := m.Run(ctx, "example", cmd)
	fmt.Println(r.Approval.Outcome, "by", r.Approval.By)
	r = m.Run(ctx, "example", cmd, manager.WithAsker(onceAsker{}))
	fmt.Println(r.Approval.Outcome, "by", r.Approval.By)
	// Output:
	// blocked by rule
	// approved_once by user
}
