package terminal

import (
	"testing"

	"github.com/a55dbaac/berth/approval"
)

// TestExitStatus: what a command-line run exits with for each kind of
// result, and what it says on stderr.
func TestExitStatus(t *testing.T) {
	msg := "it broke"
	blocked := &approval.Decision{Outcome: approval.Denied, Message: "BLOCKED: no"}
	allowed := &approval.Decision{Outcome: approval.Allowed}
	for _, c := range []struct {
		name string
		res  Result
		code int
		say  string
	}{
		{"own status", Result{ExitCode: 7}, 7, ""},
		{"allowed by a rule", Result{ExitCode: 0, Approval: allowed}, 0, ""},
		{"blocked", Result{ExitCode: StatusBlocked, Error: &blocked.Message, Approval: blocked}, StatusBlocked, "BLOCKED: no"},
		{"blocked, old exit code", Result{ExitCode: -1, Error: &blocked.Message, Approval: blocked}, StatusBlocked, "BLOCKED: no"},
		{"moved", Result{ExitCode: -1, MovedToBackground: true}, StatusMoved, ""},
		{"berth failed", Result{ExitCode: -1, Error: &msg}, StatusError, "it broke"},
		{"no such status", Result{ExitCode: 300}, StatusError, ""},
		{"timeout", Result{ExitCode: 124}, 124, ""},
	} {
		code, say := c.res.ExitStatus()
		if code != c.code || say != c.say {
			t.Errorf("%s: ExitStatus() = %d, %q; want %d, %q", c.name, code, say, c.code, c.say)
		}
	}
}
