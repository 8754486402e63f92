package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/terminal"
)

// PatchResult is the patch tool's result.
type PatchResult struct {
	// Path is the file patched, resolved.
	Path string `json:"path"`
	// Replacements is how many occurrences of old_string were replaced.
	Replacements int `json:"replacements"`
	// Diff is a unified diff of the change (3 lines of context).
	Diff string `json:"diff"`
}

// Patch replaces old with new in the file at path. old must occur exactly
// once unless replaceAll is set, in which case every occurrence is
// replaced. When old is not found the error shows the region of the file
// that resembles it most, with line numbers, so the caller can correct its
// text. A file with CRLF line endings also matches an old string written
// with plain newlines. The file is written back atomically with Write's
// guarantees (WithCheck included: on this machine's files the file is
// read from and written back to the one place the check was told), and
// the result carries a unified diff.
func Patch(ctx context.Context, env *terminal.Environment, path, old, new string, replaceAll bool, opts ...WriteOption) (PatchResult, error) {
	if old == "" {
		return PatchResult{}, errors.New("patch: old_string is empty; give the exact text to replace (use write_file to create a file)")
	}
	if old == new {
		return PatchResult{}, errors.New("patch: old_string and new_string are identical; nothing to change")
	}
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	t, err := resolve(ctx, env, path)
	if err != nil {
		return PatchResult{}, fmt.Errorf("patch: %w", err)
	}
	// The check comes first, as for a write: a patch the gate refuses
	// reads nothing either.
	var lands string
	if native(env) {
		if lands, err = t.lands(); err != nil {
			return PatchResult{}, fmt.Errorf("patch: %w", err)
		}
		p, err := t.hostPath()
		if err != nil {
			return PatchResult{}, fmt.Errorf("patch: %w", err)
		}
		if err := o.approve(p, lands); err != nil {
			return PatchResult{}, err.(checkErr).err
		}
	} else if err := o.approve(t.String(), ""); err != nil {
		return PatchResult{}, err.(checkErr).err
	}
	content, latin1, err := readAll(ctx, env, t, lands)
	if err != nil {
		return PatchResult{}, fmt.Errorf("patch: %w", err)
	}
	count := strings.Count(content, old)
	crlfMatch := false
	if count == 0 && strings.Contains(content, "\r\n") && !strings.Contains(old, "\r") {
		crlfOld := strings.ReplaceAll(old, "\n", "\r\n")
		if c := strings.Count(content, crlfOld); c > 0 {
			old, count, crlfMatch = crlfOld, c, true
		}
	}
	if (crlfMatch || crlfFile(content)) && !strings.Contains(new, "\r") {
		// Lines inserted into a CRLF file end like its other lines.
		new = strings.ReplaceAll(new, "\n", "\r\n")
	}
	switch {
	case count == 0:
		return PatchResult{}, fmt.Errorf("patch: old_string not found in %s%s", t, closestMatch(content, old))
	case count > 1 && !replaceAll:
		return PatchResult{}, fmt.Errorf("patch: old_string occurs %d times in %s (at lines %s); include more surrounding lines to make it unique, or set replace_all to replace every occurrence",
			count, t, occurrenceLines(content, old, 10))
	}
	n := 1
	if replaceAll {
		n = -1
	}
	updated := strings.Replace(content, old, new, n)
	if len(updated) > MaxWriteBytes {
		return PatchResult{}, fmt.Errorf("patch: the patched file would be %s, over the %s limit", mib(len(updated)), mib(MaxWriteBytes))
	}
	data := updated
	if latin1 {
		if data, err = encodeLatin1(updated); err != nil {
			return PatchResult{}, fmt.Errorf("patch: %s is Latin-1 (ISO-8859-1) text, and new_string cannot be stored in it: %w; convert the file to UTF-8 first (iconv -f latin1 -t utf-8) or use characters Latin-1 has", t, err)
		}
	}
	// Approved above: the write goes where the check was told.
	if _, err := write(ctx, env, t, lands, data, &writeOptions{}); err != nil {
		return PatchResult{}, fmt.Errorf("patch: %w", err)
	}
	if !replaceAll {
		count = 1
	}
	diff := UnifiedDiff("a/"+strings.TrimPrefix(t.String(), "/"), "b/"+strings.TrimPrefix(t.String(), "/"), content, updated)
	return PatchResult{Path: t.String(), Replacements: count, Diff: redactDiff(diff)}, nil
}

// crlfFile reports whether most of content's line endings are CRLF.
func crlfFile(content string) bool {
	crlf := strings.Count(content, "\r\n")
	return crlf > 0 && crlf*2 > strings.Count(content, "\n")
}

// redactDiff redacts the text lines of a unified diff (see redactLines),
// keeping its headers and the one-character prefix of each line.
func redactDiff(diff string) string {
	lines := strings.Split(diff, "\n")
	body := make([]string, 0, len(lines))
	var at []int
	for i, l := range lines {
		if i < 2 || l == "" || strings.HasPrefix(l, "@@ ") || strings.HasPrefix(l, "\\") {
			continue
		}
		at = append(at, i)
		body = append(body, l[1:])
	}
	for k, red := range redactLines(body) {
		i := at[k]
		lines[i] = lines[i][:1] + red
	}
	return strings.Join(lines, "\n")
}

// occurrenceLines lists the line numbers where old starts, at most max.
func occurrenceLines(content, old string, max int) string {
	var nums []string
	off := 0
	for len(nums) < max {
		i := strings.Index(content[off:], old)
		if i < 0 {
			break
		}
		nums = append(nums, strconv.Itoa(strings.Count(content[:off+i], "\n")+1))
		off += i + len(old)
	}
	if strings.Count(content, old) > max {
		nums = append(nums, "...")
	}
	return strings.Join(nums, ", ")
}

// readAll reads a whole text file for editing. A Latin-1 file is returned
// decoded, with latin1 set. On this machine's files, at is the host path
// to read ("": t's).
func readAll(ctx context.Context, env *terminal.Environment, t target, at string) (content string, latin1 bool, err error) {
	var data []byte
	if native(env) {
		p, err := t.hostPath()
		if err != nil {
			return "", false, err
		}
		if at != "" {
			p = at
		}
		f, st, err := openRegular(t, p)
		if err != nil {
			return "", false, err
		}
		defer f.Close()
		if st.Size() > MaxWriteBytes {
			return "", false, fmt.Errorf("%s is %s; patch edits files up to %s", t, mib(int(st.Size())), mib(MaxWriteBytes))
		}
		data, err = io.ReadAll(io.LimitReader(f, MaxWriteBytes+1))
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", t, unwrapPath(err))
		}
		if len(data) > MaxWriteBytes {
			return "", false, fmt.Errorf("%s grew past %s while being read; patch edits files up to %s", t, mib(MaxWriteBytes), mib(MaxWriteBytes))
		}
	} else {
		tag := newTag()
		script := fmt.Sprintf(probeScript+`  s=$(( $(command wc -c <"$p") ))
  if [ "$s" -gt %[4]d ]; then printf '\n%%s big %%s\n' %[1]s "$s"
  else printf '\n%%s ok %%s\n' %[1]s "$s"; command cat "$p"; fi
fi`, tag, t.word(), t.dir().word(), MaxWriteBytes)
		out, err := runScript(ctx, env, script, nil, MaxWriteBytes+64<<10)
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", t, err)
		}
		r, ok := parseReply(tag, out)
		if !ok {
			return "", false, fmt.Errorf("read %s: unexpected reply from the environment: %q", t, clip(out, 300))
		}
		switch r.status {
		case "ok":
			data = r.payload
		case "isdir":
			return "", false, isDir(t)
		case "special":
			return "", false, notRegular(t)
		case "missing":
			return "", false, notFound(t, splitNames(r.payload))
		case "nodir":
			return "", false, notFound(t, nil)
		case "noperm":
			return "", false, fmt.Errorf("%s: permission denied", t)
		case "big":
			n, _ := strconv.Atoi(strings.Join(r.fields, ""))
			return "", false, fmt.Errorf("%s is %s; patch edits files up to %s", t, mib(n), mib(MaxWriteBytes))
		default:
			return "", false, fmt.Errorf("read %s: unexpected reply %q", t, r.status)
		}
	}
	kind, latin1 := textKind(data, false)
	if kind != "" {
		return "", false, fmt.Errorf("%s is a binary file (%s); patch edits text files only", t, kind)
	}
	if latin1 {
		return decodeLatin1(data), true, nil
	}
	return string(data), false, nil
}

// closestMatch describes the region of content most similar to old, for
// the not-found error: line numbers and the region's text, plus a note when
// the two differ only in whitespace.
func closestMatch(content, old string) string {
	lines := strings.Split(content, "\n")
	want := strings.Split(strings.TrimRight(old, "\n"), "\n")
	for len(want) > 1 && strings.TrimSpace(want[0]) == "" {
		want = want[1:]
	}
	k := len(want)
	if k > len(lines) {
		k = len(lines)
	}
	// Bound the work: at most about two million line comparisons.
	probe := want
	if budget := 2_000_000 / max(1, len(lines)); len(probe) > budget {
		probe = probe[:max(1, budget)]
	}
	wantGrams := make([][]uint32, len(probe))
	for i, w := range probe {
		wantGrams[i] = bigrams(w)
	}
	gramCache := make(map[int][]uint32)
	grams := func(i int) []uint32 {
		g, ok := gramCache[i]
		if !ok {
			g = bigrams(lines[i])
			gramCache[i] = g
		}
		return g
	}
	best, bestScore := -1, 0.0
	for start := 0; start+len(probe) <= len(lines); start++ {
		score := 0.0
		for j := range probe {
			score += lineSim(lines[start+j], probe[j], grams(start+j), wantGrams[j])
		}
		score /= float64(len(probe))
		if score > bestScore {
			best, bestScore = start, score
		}
	}
	if best < 0 || bestScore < 0.3 {
		return ". No similar region was found: read the file again (read_file) and copy the text exactly, including indentation."
	}
	end := min(best+k, len(lines))
	var b strings.Builder
	fmt.Fprintf(&b, ". The closest match (%d%% similar) is at lines %d-%d:\n", int(bestScore*100+0.5), best+1, end)
	for i, l := range redactLines(lines[best:end]) {
		fmt.Fprintf(&b, "%6d|%s\n", best+i+1, clipLine(l, 300))
	}
	region := strings.Join(lines[best:end], "\n")
	if squash(region) == squash(old) {
		b.WriteString("It differs from old_string only in whitespace or indentation; copy those characters exactly.")
	} else {
		b.WriteString("Copy the text exactly as the file has it (read_file shows it), including indentation.")
	}
	return b.String()
}

// lineSim is the similarity of two lines in [0, 1]: 1 when equal apart
// from surrounding whitespace, else the Dice coefficient of their
// character bigrams.
func lineSim(a, b string, ga, gb []uint32) float64 {
	ta, tb := strings.TrimSpace(a), strings.TrimSpace(b)
	if ta == tb {
		return 1
	}
	if len(ga) == 0 || len(gb) == 0 {
		return 0
	}
	common, i, j := 0, 0, 0
	for i < len(ga) && j < len(gb) {
		switch {
		case ga[i] == gb[j]:
			common++
			i++
			j++
		case ga[i] < gb[j]:
			i++
		default:
			j++
		}
	}
	return 2 * float64(common) / float64(len(ga)+len(gb))
}

// bigrams returns the sorted byte bigrams of a trimmed line.
func bigrams(s string) []uint32 {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = s[:2000]
	}
	if len(s) < 2 {
		if s == "" {
			return nil
		}
		return []uint32{uint32(s[0])}
	}
	g := make([]uint32, 0, len(s)-1)
	for i := 0; i+1 < len(s); i++ {
		g = append(g, uint32(s[i])<<8|uint32(s[i+1]))
	}
	sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
	return g
}

// squash removes all whitespace.
func squash(s string) string {
	return strings.Join(strings.Fields(s), "")
}

func clipLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + " ..."
}
