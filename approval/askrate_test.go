package approval

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trajectoryCtx is where the commands of testdata/trajectories.jsonl ran:
// an agent's checkout of a project, as root, on a machine of its own, in
// a shell whose IFS is the default (what berth's session reports of a
// shell no command has given another).
var trajectoryCtx = Context{Backend: "local", Cwd: "/testbed", Home: "/root", BerthHome: "/root/.berth", ConfigPath: "/root/.berth/config.yaml",
	Resolve: func(p string) string { return p }, IFS: &defaultIFS}

var defaultIFS = " \t\n"

// TestAskRateOnTrajectories measures, on real agent commands (see
// testdata/README.md), how many berth would ask about in manual mode,
// which is what a client that cannot be asked sees BLOCKED, and how many
// the floor blocks. None may be blocked by the floor; the asked are
// listed, and their number may not grow past the one measured when the
// corpus was made (docs/approvals.md gives it beside Hermes' patterns').
func TestAskRateOnTrajectories(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "trajectories.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := DefaultPolicy()
	n, asked, floors := 0, 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct{ Cmd string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
		v := p.Check(rec.Cmd, trajectoryCtx)
		switch {
		case v.Action == Block && v.By == ByFloor:
			floors++
			t.Errorf("blocked by the floor: %.120q (%s)", rec.Cmd, describe(v.Need))
		case v.Action == Ask:
			asked++
			t.Logf("asked: %.120q (%s)", strings.ReplaceAll(rec.Cmd, "\n", "\\n"), describe(v.Need))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("berth, manual mode: %d of %d asked (blocked where nobody can be asked), %d blocked by the floor", asked, n, floors)
	if n < 665 {
		t.Fatalf("the corpus has %d commands; it had 665", n)
	}
	if asked > askedWhenMeasured {
		t.Errorf("%d commands asked, more than the %d measured when the corpus was made: a regression in precision", asked, askedWhenMeasured)
	}
}

// askedWhenMeasured is how many commands of the corpus berth asked about
// when it was made (docs/approvals.md).
const askedWhenMeasured = 8
