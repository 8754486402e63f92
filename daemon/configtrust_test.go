package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/daemon/wire"
)

// TestConfigFileTrust (N8): the daemon loads no configuration file or .env
// that anybody may write: a call is refused (CodeConfig), with nothing run,
// and a Quick call is handed back to the caller (whose own load refuses it
// too). A group-writable one is a warning.
func TestConfigFileTrust(t *testing.T) {
	home, _ := serve(t, 0)
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := inputs(t, home)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, name := range []string{"config.yaml", ".env"} {
		p := filepath.Join(home, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Command: "touch " + marker}, wire.RunOptions{})
		if !wire.IsCode(err, wire.CodeConfig) || !strings.Contains(err.Error(), p+" is writable by anybody") {
			t.Fatalf("world-writable %s: %v; want a refusal naming it", name, err)
		}
		r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Command: "touch " + marker, Quick: true}, wire.RunOptions{})
		if err != nil || !r.Fallback {
			t.Fatalf("world-writable %s, Quick: %+v, %v; want it handed back", name, r, err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("world-writable %s: the command ran", name)
		}
		if err := os.Chmod(p, 0o620); err != nil {
			t.Fatal(err)
		}
		r, err = c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Command: "true", Quick: true}, wire.RunOptions{})
		if err != nil || r.Exit != 0 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "writable by its group") {
			t.Fatalf("group-writable %s: %+v, %v; want it run, with a warning", name, r, err)
		}
		os.Remove(p)
	}
}
