// Package shellword quotes strings for POSIX shells.
package shellword

import "strings"

// Quote returns s as one single-quoted shell word. Single quotes cannot be
// escaped inside single quotes, so each one closes the string, adds an
// escaped quote and reopens it. The result is valid in bash and any POSIX
// sh and carries every byte but NUL verbatim, newlines included.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
