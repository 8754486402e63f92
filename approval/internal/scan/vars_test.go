package scan

import (
	"strings"
	"testing"
)

// TestReadFields: read's field splitting, against what bash 5 gives.
func TestReadFields(t *testing.T) {
	for _, tc := range []struct {
		line, ifs string
		n         int
		want      []string
	}{
		{"x:", ":", 1, []string{"x"}},
		{"x::", ":", 1, []string{"x::"}},
		{"  /  ", " \t\n", 1, []string{"/"}},
		{"  /  ", "", 1, []string{"  /  "}},
		{" x  y  z ", " \t\n", 2, []string{"x", "y  z"}},
		{"x:y:", ":", 2, []string{"x", "y"}},
		{" a b  c ", " \t\n", -1, []string{"a", "b", "c"}},
		{"x : y : z", " :", 2, []string{"x", "y : z"}},
		{"a", " \t\n", 3, []string{"a", "", ""}},
		{"x:/", ":", 2, []string{"x", "/"}},
	} {
		got := readFields(tc.line, tc.ifs, tc.n)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("readFields(%q, %q, %d) = %q, want %q", tc.line, tc.ifs, tc.n, got, tc.want)
		}
	}
}
