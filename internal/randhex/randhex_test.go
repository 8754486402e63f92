package randhex

import (
	"regexp"
	"testing"
)

func TestString(t *testing.T) {
	hexRE := regexp.MustCompile(`^[0-9a-f]{24}$`)
	a, b := String(12), String(12)
	if !hexRE.MatchString(a) || !hexRE.MatchString(b) || a == b {
		t.Fatalf("String(12) gave %q and %q", a, b)
	}
	if String(0) != "" {
		t.Fatal("String(0) not empty")
	}
}
