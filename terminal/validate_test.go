package terminal

import (
	"errors"
	"strings"
	"testing"

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
