package session

import (
	"testing"

	"github.com/a55dbaac/berth/internal/shparse"
)

func TestMayChangeState(t *testing.T) {
	funcs := map[string]bool{"myfn": true}
	for cmd, want := range map[string]bool{
		"true":                         false,
		"ls -la /tmp | grep x":         false,
		"echo $HOME > /tmp/x":          false,
		"git status && make test":      false,
		"cat <<EOF\nhi\nEOF":           false,
		"FOO=1 env":                    false,
		"(export A=1)":                 true, // conservative
		"export A=1":                   true,
		"A=1":                          true,
		"declare -x B=2":               true,
		"source venv/bin/activate":     true,
		". ./env.sh":                   true,
		"eval \"$x\"":                  true,
		"cd /tmp":                      true,
		"myfn arg":                     true,
		"f() { export Z=1; }":          true,
		"$CMD arg":                     true,
		"echo ${X:=3}":                 true,
		"for i in 1 2; do :; done":     true,
		"echo 'unbalanced":             true,
		"ls; unset PATH":               true,
		"if true; then export Q=1; fi": true,
		"echo $((n++))":                true,
	} {
		if got, _ := analyze(shparse.New(cmd), funcs); got != want {
			t.Errorf("analyze(%q) changes state = %v, want %v", cmd, got, want)
		}
	}
}
