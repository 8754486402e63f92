package files

import (
	"testing"

	"github.com/a55dbaac/berth/terminal"
)

// IsNative exposes native to the external tests.
func IsNative(env *terminal.Environment) bool { return native(env) }

// SetNoRipgrep makes Search ignore rg until the end of the test.
func SetNoRipgrep(t testing.TB, v bool) {
	saved := noRipgrep
	noRipgrep = v
	t.Cleanup(func() { noRipgrep = saved })
}

// SetSessionStdinMax changes the inline size of session writes until the
// end of the test (-1: never inline).
func SetSessionStdinMax(t testing.TB, n int) {
	saved := sessionStdinMax
	sessionStdinMax = n
	t.Cleanup(func() { sessionStdinMax = saved })
}
