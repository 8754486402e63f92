package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/terminal"
)

// SearchResult is the search_files tool's result.
type SearchResult struct {
	// Matches are the content matches shown (target "content").
	Matches []Match `json:"matches,omitzero"`
	// Files are the matching file paths shown (target "files").
	Files []string `json:"files,omitzero"`
	// Total is how many matches (or files) there are in all.
	Total int `json:"total"`
	// Truncated reports that results exist beyond the ones shown.
	Truncated bool `json:"truncated"`
	// Hint says how to see more, or what went wrong with part of the search.
	Hint string `json:"hint,omitempty"`
	// Engine is the tool that searched: rg, grep or find.
	Engine string `json:"engine"`
}

// Match is one matching line.
type Match struct {
	Path    string        `json:"path"`
	Line    int           `json:"line"`
	Content string        `json:"content"`
	Before  []ContextLine `json:"before,omitempty"`
	After   []ContextLine `json:"after,omitempty"`
}

// ContextLine is a line around a match.
type ContextLine struct {
	Line    int    `json:"line"`
	Content string `json:"content"`
}

// Search limits.
const (
	// MaxSearchLimit is the largest page Search returns.
	MaxSearchLimit = 500
	// MaxSearchContext is the most context lines around a match.
	MaxSearchContext = 10
	// searchLineChars is where a matching line is cut.
	searchLineChars = 500
	// searchCap bounds the lines (content) or bytes (files) a search may
	// produce; totals past it are lower bounds.
	searchCapLines = 20000
	searchCapBytes = 16 << 20
)

// noRipgrep makes Search ignore rg; the package's tests use it to prove
// the grep fallback on a machine that has rg.
var noRipgrep = false

// SearchRequest is a search_files call, with the contract's field names.
type SearchRequest struct {
	Pattern  string `json:"pattern"`
	Path     string `json:"path,omitempty"`      // default: the session's cwd
	Target   string `json:"target,omitempty"`    // "content" (default) or "files"
	FileGlob string `json:"file_glob,omitempty"` // e.g. "*.go", "*.{ts,tsx}"
	Limit    int    `json:"limit,omitempty"`     // default 50, at most 500
	Context  int    `json:"context,omitempty"`   // lines around each content match
	Offset   int    `json:"offset,omitempty"`    // results to skip (pagination)
}

// Search runs a SearchRequest; see search for what each field does.
func Search(ctx context.Context, env *terminal.Environment, req SearchRequest) (SearchResult, error) {
	return search(ctx, env, req.Pattern, req.Path, req.Target, req.FileGlob, req.Limit, req.Context, req.Offset)
}

// search looks for pattern under path (default the session's cwd).
//
// With target "content" (the default) pattern is a regular expression
// matched against file contents, and each match comes with its path, line
// number, text (cut at 500 characters) and up to context lines around it.
// With target "files" pattern is a glob matched against file names (or,
// when it contains a slash, against paths relative to path; ** crosses
// directories), and the result lists file paths sorted by name.
//
// fileGlob restricts either search to files whose name matches it (for
// example "*.go" or "*.{ts,tsx}"). Results are paginated: offset skips that
// many, limit (default 50, at most 500) caps what is returned, and Total
// counts them all. rg is used when the environment has it (it skips hidden
// and git-ignored files); otherwise grep -r for content and find for files,
// skipping .git and node_modules.
func search(ctx context.Context, env *terminal.Environment, pattern, dir, target, fileGlob string, limit, around, offset int) (SearchResult, error) {
	if target == "" {
		target = "content"
	}
	if target != "content" && target != "files" {
		return SearchResult{}, fmt.Errorf("search_files: target %q: must be \"content\" (search inside files) or \"files\" (find files by name)", target)
	}
	if pattern == "" {
		if target == "content" {
			return SearchResult{}, errors.New("search_files: pattern is empty; give a regular expression to look for")
		}
		pattern = "*"
	}
	if strings.IndexByte(pattern, 0) >= 0 || strings.IndexByte(fileGlob, 0) >= 0 {
		return SearchResult{}, errors.New("search_files: pattern contains a NUL byte")
	}
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	limit = min(limit, MaxSearchLimit)
	offset = max(offset, 0)
	around = min(max(around, 0), MaxSearchContext)
	if dir == "" {
		dir = "."
	}
	root, err := resolve(ctx, env, dir)
	if err != nil {
		return SearchResult{}, fmt.Errorf("search_files: %w", err)
	}
	var globRe *regexp.Regexp
	if fileGlob != "" {
		if globRe, err = globRegexp(fileGlob); err != nil {
			return SearchResult{}, fmt.Errorf("search_files: file_glob %q: %w", fileGlob, err)
		}
	}
	var res SearchResult
	if target == "content" {
		res, err = searchContent(ctx, env, root, pattern, fileGlob, globRe, limit, around, offset)
	} else {
		var nameRe *regexp.Regexp
		if nameRe, err = globRegexp(pattern); err != nil {
			return SearchResult{}, fmt.Errorf("search_files: pattern %q is not a valid glob: %w", pattern, err)
		}
		res, err = searchFiles(ctx, env, root, pattern, nameRe, globRe, limit, offset)
	}
	if err != nil {
		return SearchResult{}, fmt.Errorf("search_files: %w", err)
	}
	return res, nil
}

// searchScript runs one search engine and frames its output:
// "\nTAG start ENGINE\n", the output, "\nTAG end STATUS\n" and the first
// 2000 bytes of its error output.
const searchScript = shellPrologue + `r=%[2]s
if [ ! -e "$r" ]; then printf '\n%%s noroot\n' %[1]s; exit 1; fi
e=${TMPDIR:-/tmp}/.berth-search-%[1]s
if [ -z "%[3]s" ] && command -v rg >/dev/null 2>&1; then engine=rg
else
  command grep -Z -q x /dev/null 2>/dev/null
  if [ $? -eq 1 ]; then engine=gnu; else engine=grep; fi
fi
printf '\n%%s start %%s\n' %[1]s "$engine"
case $engine in
rg) { %[4]s 2>"$e"; printf %%s $? >"$e.rc"; } | %[7]s ;;
gnu) { %[5]s 2>"$e"; printf %%s $? >"$e.rc"; } | %[7]s ;;
*) { %[6]s 2>"$e"; printf %%s $? >"$e.rc"; } | %[7]s ;;
esac
printf '\n%%s end %%s\n' %[1]s "$(command cat "$e.rc" 2>/dev/null)"
command head -c 2000 "$e" 2>/dev/null
command rm -f "$e" "$e.rc"`

// runSearch runs the three engine command lines and returns the engine
// used, its output, exit status and error text.
func runSearch(ctx context.Context, env *terminal.Environment, root target, rg, gnu, grep, capCmd string) (engine string, out []byte, status int, stderr string, err error) {
	tag := newTag()
	no := ""
	if noRipgrep {
		no = "1"
	}
	script := fmt.Sprintf(searchScript, tag, root.word(), no, rg, gnu, grep, capCmd)
	raw, err := runScript(ctx, env, script, nil, searchCapBytes+1<<20)
	if err != nil {
		return "", nil, 0, "", fmt.Errorf("search %s: %w", root, err)
	}
	r, ok := parseReply(tag, raw)
	switch {
	case !ok:
		return "", nil, 0, "", fmt.Errorf("search %s: unexpected reply from the environment: %q", root, clip(raw, 300))
	case r.status == "noroot":
		return "", nil, 0, "", fmt.Errorf("%s does not exist", root)
	case r.status != "start" || len(r.fields) != 1:
		return "", nil, 0, "", fmt.Errorf("search %s: unexpected reply %q", root, r.status)
	}
	endMark := []byte("\n" + tag + " end ")
	i := bytes.LastIndex(r.payload, endMark)
	if i < 0 {
		return "", nil, 0, "", fmt.Errorf("search %s: the search ended without its status", root)
	}
	out = r.payload[:i]
	statusLine, errText, _ := bytes.Cut(r.payload[i+len(endMark):], []byte("\n"))
	status, err = strconv.Atoi(strings.TrimSpace(string(statusLine)))
	if err != nil {
		status = -1 // cut short by the cap: the engine died of SIGPIPE
	}
	engine = r.fields[0]
	if engine == "gnu" {
		engine = "grep"
	}
	return engine, out, status, strings.TrimSpace(string(errText)), nil
}

// searchContent searches inside files.
func searchContent(ctx context.Context, env *terminal.Environment, root target, pattern, fileGlob string, globRe *regexp.Regexp, limit, context, offset int) (SearchResult, error) {
	ctxArg := ""
	if context > 0 {
		ctxArg = " -C " + strconv.Itoa(context)
	}
	rgGlob, gnuGlob := "", ""
	if fileGlob != "" && !strings.Contains(fileGlob, "/") {
		rgGlob = " --glob " + shellword.Quote(fileGlob)
		if !strings.ContainsAny(fileGlob, "{}") {
			gnuGlob = " --include=" + shellword.Quote(fileGlob)
		}
	}
	pat := shellword.Quote(pattern)
	rg := "command rg --no-config --color never --sort path --no-heading --with-filename --line-number --null" + ctxArg + rgGlob + " -e " + pat + ` -- "$r"`
	gnu := "command grep -rnHIZE" + ctxArg + " --exclude-dir=.git --exclude-dir=node_modules" + gnuGlob + " -e " + pat + ` -- "$r"`
	grep := "command grep -rnHE" + ctxArg + " -e " + pat + ` "$r"`
	engine, out, status, stderr, err := runSearch(ctx, env, root, rg, gnu, grep, "command head -n "+strconv.Itoa(searchCapLines))
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Matches: []Match{}, Engine: engine}
	var pending []ContextLine
	pendingPath := ""
	var last *Match // the last match kept
	lastPath, lastLine := "", 0
	nul := engine == "rg" || bytes.IndexByte(out, 0) >= 0
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) == 0 || string(line) == "--" {
			if string(line) == "--" {
				pending, last = nil, nil
			}
			continue
		}
		p, n, isMatch, text, ok := parseGrepLine(line, nul)
		if !ok || engine == "grep" && skippedDir(p) || globRe != nil && !globMatch(globRe, fileGlob, root, p) {
			continue
		}
		if !isMatch {
			cl := ContextLine{Line: n, Content: text}
			if last != nil && p == lastPath && n > lastLine && n-lastLine <= context && len(last.After) < context {
				last.After = append(last.After, cl)
				continue
			}
			if p != pendingPath {
				pending, pendingPath = nil, p
			}
			pending = append(pending, cl)
			continue
		}
		idx := res.Total
		res.Total++
		lastPath, lastLine = p, n
		if idx < offset || idx >= offset+limit {
			last, pending = nil, nil
			continue
		}
		m := Match{Path: p, Line: n, Content: text}
		if p == pendingPath {
			for _, c := range pending {
				if c.Line < n && n-c.Line <= context {
					m.Before = append(m.Before, c)
				}
			}
		}
		pending = nil
		res.Matches = append(res.Matches, m)
		last = &res.Matches[len(res.Matches)-1]
	}
	// A status of 1 is "no match"; anything else with no result is an error.
	if status != 0 && status != 1 && status != -1 && res.Total == 0 {
		if stderr == "" {
			stderr = fmt.Sprintf("%s exited with status %d", engine, status)
		}
		return SearchResult{}, fmt.Errorf("search for %q in %s: %s", pattern, root, lastLines(stderr, 3))
	}
	for i := range res.Matches {
		redactMatch(&res.Matches[i])
	}
	finish(&res, len(res.Matches), offset, status == -1 || bytes.Count(out, []byte("\n")) >= searchCapLines)
	if stderr != "" && status != 0 && status != 1 && status != -1 {
		res.Hint = strings.TrimSpace(res.Hint + " Some files could not be searched: " + lastLines(stderr, 2))
	}
	return res, nil
}

// redactMatch redacts the lines of a match (see redactLines), its context
// lines with it, so a key block around a match is recognised.
func redactMatch(m *Match) {
	lines := make([]string, 0, len(m.Before)+1+len(m.After))
	for _, c := range m.Before {
		lines = append(lines, c.Content)
	}
	lines = append(lines, m.Content)
	for _, c := range m.After {
		lines = append(lines, c.Content)
	}
	lines = redactLines(lines)
	for i := range m.Before {
		m.Before[i].Content = lines[i]
	}
	m.Content = lines[len(m.Before)]
	for i := range m.After {
		m.After[i].Content = lines[len(m.Before)+1+i]
	}
}

// finish sets Truncated and the pagination hint.
func finish(res *SearchResult, shown, offset int, capped bool) {
	if offset+shown < res.Total {
		res.Truncated = true
		res.Hint = fmt.Sprintf("Showing %d-%d of %d; use offset=%d for more, or narrow the pattern, path or file_glob.", offset+1, offset+shown, res.Total, offset+shown)
	} else if shown == 0 && offset > 0 && res.Total > 0 {
		res.Hint = fmt.Sprintf("offset %d is past the last of %d results.", offset, res.Total)
	}
	if capped {
		res.Truncated = true
		res.Hint = strings.TrimSpace(res.Hint + " The search stopped early: the total is a lower bound; narrow the search.")
	}
}

// grepLine matches "path:N:text" (or "path-N-text" for context) when the
// engine cannot separate the path with a NUL byte.
var grepLine = regexp.MustCompile(`^(.*?)([:-])([0-9]+)([:-])`)

// parseGrepLine splits one output line of rg or grep.
func parseGrepLine(line []byte, nul bool) (p string, n int, isMatch bool, text string, ok bool) {
	var rest []byte
	if nul {
		i := bytes.IndexByte(line, 0)
		if i < 0 {
			return "", 0, false, "", false
		}
		p, rest = string(line[:i]), line[i+1:]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || j == len(rest) || rest[j] != ':' && rest[j] != '-' {
			return "", 0, false, "", false
		}
		n, _ = strconv.Atoi(string(rest[:j]))
		isMatch = rest[j] == ':'
		rest = rest[j+1:]
	} else {
		m := grepLine.FindSubmatchIndex(line)
		if m == nil || line[m[4]] != line[m[8]] {
			return "", 0, false, "", false
		}
		p = string(line[:m[3]])
		n, _ = strconv.Atoi(string(line[m[6]:m[7]]))
		isMatch = line[m[4]] == ':'
		rest = line[m[1]:]
	}
	return p, n, isMatch, cleanLine(rest), true
}

// cleanLine makes a matched line presentable: valid UTF-8, no CR, at most
// searchLineChars characters.
func cleanLine(b []byte) string {
	s := strings.ToValidUTF8(strings.TrimRight(string(b), "\r"), "\uFFFD")
	if utf8.RuneCountInString(s) > searchLineChars {
		s = string([]rune(s)[:searchLineChars]) + " ... [line truncated]"
	}
	return s
}

// skippedDir reports whether a path lies in a directory the fallback
// engines skip (rg skips them through its ignore rules).
func skippedDir(p string) bool {
	return strings.Contains(p, "/.git/") || strings.Contains(p, "/node_modules/")
}

// searchFiles finds files by name.
func searchFiles(ctx context.Context, env *terminal.Environment, root target, pattern string, nameRe, globRe *regexp.Regexp, limit, offset int) (SearchResult, error) {
	rg := `command rg --no-config --files --null -- "$r"`
	find := `command find "$r" \( -name .git -o -name node_modules \) -prune -o -type f -print0`
	engine, out, status, stderr, err := runSearch(ctx, env, root, rg, find, find, "command head -c "+strconv.Itoa(searchCapBytes))
	if err != nil {
		return SearchResult{}, err
	}
	if engine != "rg" {
		engine = "find"
	}
	var all []string
	for _, p := range bytes.Split(out, []byte{0}) {
		if len(p) == 0 {
			continue
		}
		s := string(p)
		if !globMatch(nameRe, pattern, root, s) || globRe != nil && !globMatch(globRe, "", root, s) {
			continue
		}
		all = append(all, s)
	}
	if status != 0 && status != 1 && status != -1 && len(all) == 0 && stderr != "" {
		return SearchResult{}, fmt.Errorf("list files in %s: %s", root, lastLines(stderr, 3))
	}
	sort.Strings(all)
	res := SearchResult{Files: []string{}, Total: len(all), Engine: engine}
	if offset < len(all) {
		res.Files = all[offset:min(len(all), offset+limit)]
	}
	finish(&res, len(res.Files), offset, status == -1 || len(out) >= searchCapBytes)
	return res, nil
}

// globMatch matches a path against a compiled glob: against the base name
// when the glob has no slash, else against the path relative to root.
func globMatch(re *regexp.Regexp, glob string, root target, p string) bool {
	if !strings.Contains(glob, "/") {
		return re.MatchString(path.Base(p))
	}
	rel := p
	prefix := root.rel
	if root.home {
		// The environment expanded $HOME; match on the tail instead.
		prefix = ""
	}
	if prefix != "" && strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/") {
		rel = p[len(strings.TrimSuffix(prefix, "/"))+1:]
	}
	return re.MatchString(rel) || prefix == "" && re.MatchString(p)
}

// globRegexp compiles a shell glob with rg's extensions: * and ? within one
// path element, ** across elements, [...] classes and {a,b} alternatives.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	depth := 0
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch c {
		case '*':
			if i+1 < len(glob) && glob[i+1] == '*' {
				i++
				if i+1 < len(glob) && glob[i+1] == '/' {
					i++
					b.WriteString("(?:.*/)?")
				} else {
					b.WriteString(".*")
				}
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			j := strings.IndexByte(glob[i+1:], ']')
			if j < 0 {
				return nil, errors.New("unclosed [")
			}
			class := glob[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				return nil, errors.New("unmatched }")
			}
			depth--
			b.WriteString(")")
		case ',':
			if depth > 0 {
				b.WriteString("|")
			} else {
				b.WriteString(",")
			}
		case '\\':
			if i+1 < len(glob) {
				i++
				_, size := utf8.DecodeRuneInString(glob[i:])
				b.WriteString(regexp.QuoteMeta(glob[i : i+size]))
				i += size - 1
			}
		default:
			_, size := utf8.DecodeRuneInString(glob[i:])
			b.WriteString(regexp.QuoteMeta(glob[i : i+size]))
			i += size - 1
		}
	}
	if depth != 0 {
		return nil, errors.New("unclosed {")
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
