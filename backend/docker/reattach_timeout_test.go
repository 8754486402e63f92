package docker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// TestTimeoutOnPersistentContainerEveryWay is issue 9's defect 2: a timeout
// gives 124 with the marker and leaves no sleep behind whether the
// persistent container was just created, reattached while running, or
// restarted after the previous berth stopped it. The restarted case used to
// give 137 without the marker: the exec's event subscription replays the
// last seconds, which held the previous run's stop, and the shell was taken
// for dead 2 s later (no kill, the sleeps kept running).
func TestTimeoutOnPersistentContainerEveryWay(t *testing.T) {
	opts := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	newEnv := func(t *testing.T) (*terminal.Environment, *Backend) {
		b, err := New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		e := terminal.New(b, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir(), Session: session.Options{Grace: time.Second}})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e.Close(ctx)
		})
		return e, b
	}
	check := func(t *testing.T, e *terminal.Environment) {
		t.Helper()
		d := fmt.Sprintf("31%05d", rand.IntN(100000))
		r := e.Run(context.Background(), terminal.Request{Command: "sleep " + d + " & sleep " + d, Timeout: 2})
		if r.Error != nil || r.ExitCode != 124 || !strings.Contains(r.Output, "[Command timed out after 2s]") {
			t.Fatalf("timeout: exit %d output %q error %v, want 124 with the marker", r.ExitCode, r.Output, r.Error)
		}
		count := fmt.Sprintf(`n=0; for f in /proc/[0-9]*/cmdline; do case "$(tr '\000' ' ' <"$f" 2>/dev/null)" in *"sleep %s""%s"*) n=$((n+1)) ;; esac; done; echo $n`, d[:3], d[3:])
		if r := e.Run(context.Background(), terminal.Request{Command: count}); r.Output != "0" {
			t.Fatalf("sleeps left in the container after the timeout: %q", r.Output)
		}
	}

	t.Run("created", func(t *testing.T) {
		e, _ := newEnv(t)
		check(t, e)
	})
	t.Run("reattached running", func(t *testing.T) {
		first, _ := newEnv(t)
		if r := first.Run(context.Background(), terminal.Request{Command: "true"}); r.ExitCode != 0 {
			t.Fatalf("first environment: %+v", r)
		}
		e, _ := newEnv(t) // the container runs: reattached as is
		check(t, e)
	})
	t.Run("restarted", func(t *testing.T) {
		first, _ := newEnv(t)
		if r := first.Run(context.Background(), terminal.Request{Command: "true"}); r.ExitCode != 0 {
			t.Fatalf("first environment: %+v", r)
		}
		if err := first.Close(context.Background()); err != nil { // stops the persistent container
			t.Fatal(err)
		}
		e, _ := newEnv(t) // started again
		check(t, e)
	})
}
