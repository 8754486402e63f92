package files

import (
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines surround each hunk.
const diffContext = 3

// maxDiffWork bounds the memory of the Myers search (in ints); past it the
// changed middle of the files is shown as one replaced block.
const maxDiffWork = 8 << 20

// edit is one line of an edit script.
type edit struct {
	kind byte // ' ', '-' or '+'
	a, b int  // line index in the old and new text (of the line, or where it would be)
}

// UnifiedDiff returns a unified diff ("--- a", "+++ b", "@@" hunks with
// three lines of context) turning oldText into newText, or "" when they are
// equal. A last line without a newline is marked as diff(1) does.
func UnifiedDiff(oldName, newName, oldText, newText string) string {
	if oldText == newText {
		return ""
	}
	a, b := splitLines(oldText), splitLines(newText)
	script := diffLines(a, b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	for i := 0; i < len(script); {
		// Find the next change.
		for i < len(script) && script[i].kind == ' ' {
			i++
		}
		if i == len(script) {
			break
		}
		start := max(0, i-diffContext)
		// Extend the hunk while changes are within 2*context of each other.
		end := i
		for j := i; j < len(script); j++ {
			if script[j].kind != ' ' {
				end = j
			} else if j-end > 2*diffContext {
				break
			}
		}
		stop := min(len(script), end+diffContext+1)
		writeHunk(&out, a, b, script[start:stop])
		i = stop
	}
	return out.String()
}

// writeHunk prints one hunk.
func writeHunk(out *strings.Builder, a, b []string, h []edit) {
	var na, nb int
	for _, e := range h {
		switch e.kind {
		case ' ':
			na++
			nb++
		case '-':
			na++
		case '+':
			nb++
		}
	}
	sa, sb := h[0].a+1, h[0].b+1
	if na == 0 {
		sa--
	}
	if nb == 0 {
		sb--
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(sa, na), hunkRange(sb, nb))
	for _, e := range h {
		line := ""
		switch e.kind {
		case ' ', '-':
			line = a[e.a]
		case '+':
			line = b[e.b]
		}
		out.WriteByte(e.kind)
		if strings.HasSuffix(line, "\n") {
			out.WriteString(line)
		} else {
			out.WriteString(line + "\n\\ No newline at end of file\n")
		}
	}
}

func hunkRange(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// splitLines splits s into lines that keep their "\n".
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffLines returns an edit script from a to b: common prefix and suffix
// are matched directly, the middle with Myers' O(ND) algorithm.
func diffLines(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var script []edit
	for i := 0; i < pre; i++ {
		script = append(script, edit{' ', i, i})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	for _, e := range myers(ma, mb) {
		script = append(script, edit{e.kind, e.a + pre, e.b + pre})
	}
	for i := 0; i < suf; i++ {
		script = append(script, edit{' ', len(a) - suf + i, len(b) - suf + i})
	}
	return script
}

// myers computes a shortest edit script with Myers' algorithm, keeping the
// frontier of every step for the backtrack; when that would exceed
// maxDiffWork it replaces all of a by all of b.
func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	coarse := func() []edit {
		var s []edit
		for i := 0; i < n; i++ {
			s = append(s, edit{'-', i, 0})
		}
		for j := 0; j < m; j++ {
			s = append(s, edit{'+', n, j})
		}
		return s
	}
	if n == 0 || m == 0 {
		return coarse()
	}
	maxD := n + m
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	work := 0
	found := -1
	for d := 0; d <= maxD; d++ {
		snap := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
			}
		}
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
		work += len(snap)
		if found >= 0 {
			break
		}
		if work > maxDiffWork {
			return coarse()
		}
	}
	// Backtrack from (n, m).
	var rev []edit
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1]
		get := func(k int) int { return prev[k+(d-1)] }
		k := x - y
		var pk int
		if k == -d || k != d && get(k-1) < get(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, edit{' ', x, y})
		}
		if x == px {
			y--
			rev = append(rev, edit{'+', x, y})
		} else {
			x--
			rev = append(rev, edit{'-', x, y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{' ', x, y})
	}
	script := make([]edit, len(rev))
	for i, e := range rev {
		script[len(rev)-1-i] = e
	}
	return script
}
