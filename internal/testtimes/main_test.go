package main

import (
	"bytes"
	"strings"
	"testing"
)

// stream is go test -json's output for two packages: a passes; b has a
// test that passes, one whose second subtest fails, one that skips, and a
// test still running when the binary panicked.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"start","Package":"m/b"}
{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"    a_test.go:3: a passing test's log\n"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t3.500s\n"}
{"Action":"pass","Package":"m/a","Elapsed":3.5}
{"ImportPath":"m/c","Action":"build-output","Output":"# m/c\nc.go:1:1: expected 'package'\n"}
{"ImportPath":"m/c","Action":"build-fail"}
{"Action":"run","Package":"m/b","Test":"TestFail"}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"run","Package":"m/b","Test":"TestFail/ok"}
{"Action":"output","Package":"m/b","Test":"TestFail/ok","Output":"=== RUN   TestFail/ok\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/ok","Output":"    b_test.go:4: a passing subtest's log\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/ok","Output":"--- PASS: TestFail/ok (0.00s)\n"}
{"Action":"pass","Package":"m/b","Test":"TestFail/ok","Elapsed":0}
{"Action":"run","Package":"m/b","Test":"TestFail/bad"}
{"Action":"output","Package":"m/b","Test":"TestFail/bad","Output":"=== RUN   TestFail/bad\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/bad","Output":"=== PAUSE TestFail/bad\n"}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"printed by TestFail\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/bad","Output":"=== CONT  TestFail/bad\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/bad","Output":"    b_test.go:9: boom\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/bad","Output":"--- FAIL: TestFail/bad (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestFail/bad","Elapsed":0}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestFail","Elapsed":0}
{"Action":"run","Package":"m/b","Test":"TestSkip"}
{"Action":"output","Package":"m/b","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"m/b","Test":"TestSkip","Output":"    b_test.go:12: docker tests skipped: set BERTH_TEST_ENGINES=docker (or all) to run them\n"}
{"Action":"output","Package":"m/b","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"m/b","Test":"TestSkip","Elapsed":0}
{"Action":"run","Package":"m/b","Test":"TestHang"}
{"Action":"output","Package":"m/b","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"m/b","Test":"TestHang","Output":"    b_test.go:20: waiting\n"}
{"Action":"output","Package":"m/b","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t61.000s\n"}
{"Action":"fail","Package":"m/b","Elapsed":61}
`

func TestReport(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	r.read(strings.NewReader(stream))
	r.summary(0)
	want := `ok  	m/a	3.500s
# m/c
c.go:1:1: expected 'package'
printed by TestFail
    b_test.go:9: boom
--- FAIL: TestFail/bad (0.00s)
--- FAIL: TestFail (0.00s)
    b_test.go:20: waiting
panic: test timed out after 1s
FAIL	m/b	61.000s

package wall times, slowest first (go test -json), wall 0.0 s:
     61.0 s  FAIL  m/b  1 passed, 2 failed, 1 skipped
      3.5 s  ok    m/a  1 passed
skipped tests, by reason:
     1  docker tests skipped: set BERTH_TEST_ENGINES=docker (or all) to run them
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The exit status is the command's, whatever its events say.
func TestRunExitStatus(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{
		{`printf '%s\n' '{"Action":"pass","Package":"m/a","Elapsed":1}'`, 0},
		{`printf '%s\n' '{"Action":"pass","Package":"m/a","Elapsed":1}'; exit 3`, 3},
		{`printf '%s\n' '{"Action":"fail","Package":"m/a","Elapsed":1}'; exit 1`, 1},
	} {
		var out, errb bytes.Buffer
		if got := run([]string{"sh", "-c", c.script}, &out, &errb); got != c.want {
			t.Errorf("%s: status %d, want %d (%s%s)", c.script, got, c.want, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "package wall times") || !strings.Contains(out.String(), "m/a  0 passed") {
			t.Errorf("%s: no wall times: %s", c.script, out.String())
		}
	}
	var out, errb bytes.Buffer
	if got := run([]string{"/nonexistent/go", "test"}, &out, &errb); got != 2 || !strings.Contains(errb.String(), "/nonexistent/go") {
		t.Errorf("a command that cannot start: status %d, %q", got, errb.String())
	}
}
