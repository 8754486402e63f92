package terminal

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/internal/shparse"
)

// TestValidateRefusesDeepNesting: Validate bounds the nesting before
// anything parses the command (F4), so manager.Run and Background refuse
// such a command before the approval gate reads it.
func TestValidateRefusesDeepNesting(t *testing.T) {
	n := 250000
	for _, c := range []string{
		strings.Repeat("(", n) + "true" + strings.Repeat(")", n),
		"cat <<EOF\n$((" + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "))\nEOF",
	} {
		var ne *shparse.NestingError
		if err := Validate(Request{Command: c}); !errors.As(err, &ne) {
			t.Errorf("Validate of %d bytes of nesting: %v, want a *shparse.NestingError", len(c), err)
		}
	}
	if err := Validate(Request{Command: strings.Repeat("( ", 50) + "true" + strings.Repeat(" )", 50)}); err != nil {
		t.Errorf("50 levels: %v", err)
	}
}

// TestDirectCallersStillValidated: the manager validates a request once
// (Check, then RunChecked); a caller of the environment without the
// manager (Run, RunCall) still has its request validated, and RunChecked
// refuses a Checked that Check did not make.
func TestDirectCallersStillValidated(t *testing.T) {
	ctx := context.Background()
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := New(be, Options{SpillDir: t.TempDir()})
	defer e.Close(ctx)
	bad := Request{Command: "echo ran", Timeout: MaxTimeout + 1}
	for name, r := range map[string]Result{
		"Run":     e.Run(ctx, bad),
		"RunCall": e.RunCall(ctx, bad, Call{}),
	} {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "timeout 86401") || strings.Contains(r.Output, "ran") {
			t.Errorf("%s of a request with timeout %d: err %v, output %q; want it refused unrun", name, bad.Timeout, r.Err, r.Output)
		}
	}
	if r := e.RunChecked(ctx, Checked{}, Call{}); r.Err == nil || !strings.Contains(r.Err.Error(), "Check did not accept") {
		t.Errorf("RunChecked of a zero Checked: err %v, want a refusal", r.Err)
	}
	if _, err := Check(bad); err == nil {
		t.Errorf("Check accepted timeout %d", bad.Timeout)
	}
	c, err := Check(Request{Command: "echo ran"})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.RunChecked(ctx, c, Call{}); r.Err != nil || r.Output != "ran" {
		t.Errorf("RunChecked of a checked request: err %v, output %q; want ran", r.Err, r.Output)
	}
}
