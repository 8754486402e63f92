package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Set rewrites the YAML file at path in place so that key has value,
// keeping comments, key order and every unrelated key and section; only the
// line of the key changes (or one line is added). It creates the file (and
// its parent directory, 0700) if missing. key is resolved like in Get. The
// value is checked with the same rules as in Load before anything is
// written; lists and maps take JSON. The file is written atomically (a
// temporary file in the same directory renamed over it) and keeps its mode;
// a symbolic link is followed, not replaced.
func Set(path, key, value string) error {
	k, err := lookupKey(key)
	if err != nil {
		return err
	}
	v, p := k.parse(value)
	if p != "" {
		return fmt.Errorf("%s %s: %s", k.full(), k.shown(value), p)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	mode := fs.FileMode(0o600)
	src, err := os.ReadFile(path)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case err == nil:
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		mode = st.Mode().Perm()
	case missing:
		src = nil
	default:
		return fmt.Errorf("read config file: %w", err)
	}
	out, err := setInYAML(src, k, v)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if missing {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
	}
	return writeAtomic(path, out, mode)
}

// writeAtomic writes data to a temporary file beside path and renames it
// over path.
func writeAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// setInYAML returns src with key k set to v. It edits the text line by line
// when it can, and otherwise re-encodes the document from its node tree
// (which keeps comments but may change indentation and quoting). Either
// result is parsed back and checked before it is returned.
func setInYAML(src []byte, k *keyInfo, v any) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	out, ok, err := editText(src, &doc, k.section, k.name, yamlText(v))
	if err != nil {
		return nil, err
	}
	if ok && verifyEdit(src, out, k, v) == nil {
		return out, nil
	}
	if n, err := countDocs(src); err != nil || n > 1 {
		return nil, errors.New("the file holds several YAML documents; edit it by hand")
	}
	var fresh yaml.Node
	if err := yaml.Unmarshal(src, &fresh); err != nil {
		return nil, err
	}
	out, err = editTree(&fresh, k, v)
	if err != nil {
		return nil, err
	}
	if err := verifyEdit(src, out, k, v); err != nil {
		return nil, fmt.Errorf("could not rewrite the file safely: %w", err)
	}
	return out, nil
}

func countDocs(src []byte) (int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	n := 0
	for {
		var d yaml.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// verifyEdit checks that out holds v at k and that everything else decodes
// exactly as in src.
func verifyEdit(src, out []byte, k *keyInfo, v any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return err
	}
	sec := deref(docRoot(&doc))
	if k.section != "" {
		_, sec = lookupNode(sec, k.section)
	}
	_, vn := lookupNode(deref(sec), k.name)
	if vn == nil {
		return errors.New("key missing after the edit")
	}
	got, set, _, p := k.fromNode(vn)
	if p != "" || !set || !reflect.DeepEqual(got, v) {
		return fmt.Errorf("value reads back as %v, want %v", got, v)
	}
	var before yaml.Node
	if err := yaml.Unmarshal(src, &before); err != nil {
		return err
	}
	if !reflect.DeepEqual(stripKey(nodeValue(&before), k), stripKey(nodeValue(&doc), k)) {
		return errors.New("the edit changed other keys")
	}
	return nil
}

// nodeValue converts a parsed document to maps, slices and tagged scalar
// strings for comparison. Unlike decoding into any it accepts duplicate
// keys (the last one wins, as in Load).
func nodeValue(n *yaml.Node) any {
	n = deref(n)
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return nodeValue(n.Content[0])
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[fmt.Sprint(nodeValue(n.Content[i]))] = nodeValue(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			l[i] = nodeValue(c)
		}
		return l
	case yaml.ScalarNode:
		if isNull(n) {
			return nil
		}
		return n.ShortTag() + " " + n.Value
	}
	return nil
}

// stripKey removes section.name from a decoded document, and the section
// itself if that leaves it empty, so two documents can be compared.
func stripKey(doc any, k *keyInfo) any {
	if doc == nil {
		return map[string]any{}
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return doc
	}
	cp := make(map[string]any, len(m))
	for key, val := range m {
		cp[key] = val
	}
	if k.section == "" {
		delete(cp, "!!str "+k.name)
		return cp
	}
	section := "!!str " + k.section
	if sec, ok := cp[section].(map[string]any); ok {
		s := make(map[string]any, len(sec))
		for key, val := range sec {
			if key != "!!str "+k.name {
				s[key] = val
			}
		}
		if len(s) == 0 {
			delete(cp, section)
		} else {
			cp[section] = s
		}
	} else if cp[section] == nil {
		delete(cp, section)
	}
	return cp
}

// editTree sets k to v in the node tree doc and encodes it.
func editTree(doc *yaml.Node, k *keyInfo, v any) ([]byte, error) {
	if doc.Kind == 0 || len(doc.Content) == 0 {
		*doc = yaml.Node{Kind: yaml.DocumentNode, HeadComment: doc.HeadComment, FootComment: doc.FootComment,
			Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	root := doc.Content[0]
	if isNull(root) {
		doc.Content[0] = &yaml.Node{Kind: yaml.MappingNode, HeadComment: root.HeadComment, FootComment: root.FootComment}
		root = doc.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, errors.New("the top level is not a mapping")
	}
	root.Style &^= yaml.FlowStyle
	sec := root
	if k.section != "" {
		sec = ensureMapping(root, k.section)
	}
	if sec == nil {
		return nil, fmt.Errorf("%s is not a mapping", k.section)
	}
	nv := valueNode(v)
	if kn, vn := lookupNode(sec, k.name); kn != nil {
		nv.LineComment = vn.LineComment
		*vn = *nv
	} else {
		sec.Content = append(sec.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.name}, nv)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ensureMapping returns the mapping value of key name in m, creating it or
// replacing a null value; nil if the value is something else.
func ensureMapping(m *yaml.Node, name string) *yaml.Node {
	kn, vn := lookupNode(m, name)
	if kn == nil {
		sec := &yaml.Node{Kind: yaml.MappingNode}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, sec)
		return sec
	}
	if isNull(vn) {
		*vn = yaml.Node{Kind: yaml.MappingNode, LineComment: vn.LineComment}
	}
	vn = deref(vn)
	if vn.Kind != yaml.MappingNode {
		return nil
	}
	return vn
}

// valueNode builds the YAML node of a typed value; lists and maps use flow
// style.
func valueNode(v any) *yaml.Node {
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	switch x := v.(type) {
	case string:
		return str(x)
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: formatValue(x)}
	case float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: formatValue(x)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: formatValue(x)}
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, s := range x {
			n.Content = append(n.Content, str(s))
		}
		return n
	case map[string]string:
		n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		var m yaml.Node
		_ = m.Encode(x) // sorted keys
		for i := 0; i+1 < len(m.Content); i += 2 {
			n.Content = append(n.Content, str(m.Content[i].Value), str(m.Content[i+1].Value))
		}
		return n
	}
	return str(fmt.Sprint(v))
}

// editText sets section.key (key at the top level when section is "") to
// the YAML text val by editing the lines of src (parsed as doc): the value
// of an existing key is replaced on its line (a value spanning several
// lines becomes one line), a missing key is added after the last key of the
// section (a missing top-level key at the end of the file), a missing
// section is appended. ok is false when the layout is one it does not edit
// (flow-style mappings, an explicit null section).
func editText(src []byte, doc *yaml.Node, section, key, val string) (out []byte, ok bool, err error) {
	lines := splitLines(string(src))
	eol := "\n"
	if len(lines) > 0 && strings.HasSuffix(lines[0], "\r\n") {
		eol = "\r\n"
	}
	root := docRoot(doc)
	if root == nil || (isNull(root) && root.Value == "") {
		if section == "" {
			return appendLines(lines, eol, len(lines), key+": "+val), true, nil
		}
		return appendLines(lines, eol, len(lines), section+":", "  "+key+": "+val), true, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, false, errors.New("the top level is not a mapping")
	}
	if root.Style&yaml.FlowStyle != 0 || len(root.Content) == 0 {
		return nil, false, nil
	}
	rootIndent := root.Content[0].Column - 1
	step := childStep(root)
	pad := strings.Repeat(" ", rootIndent)
	if section == "" {
		kn, vn := lookupNode(root, key)
		if kn == nil {
			return appendLines(lines, eol, len(lines), pad+key+": "+val), true, nil
		}
		return replaceValue(lines, kn, vn, val)
	}
	secKey, secVal := lookupNode(root, section)
	if secKey == nil {
		return appendLines(lines, eol, len(lines), pad+section+":", pad+strings.Repeat(" ", step)+key+": "+val), true, nil
	}
	switch {
	case secVal.Kind == yaml.ScalarNode && secVal.Tag == "!!null" && secVal.Value == "":
		return appendLines(lines, eol, secKey.Line, pad+strings.Repeat(" ", step)+key+": "+val), true, nil
	case isNull(secVal) || secVal.Kind == yaml.AliasNode:
		return nil, false, nil
	case secVal.Kind != yaml.MappingNode:
		return nil, false, fmt.Errorf("%s (line %d) is not a mapping", section, secKey.Line)
	case secVal.Style&yaml.FlowStyle != 0 || len(secVal.Content) == 0:
		return nil, false, nil
	}
	kn, vn := lookupNode(secVal, key)
	if kn == nil {
		lastK, lastV := secVal.Content[len(secVal.Content)-2], secVal.Content[len(secVal.Content)-1]
		end := entryEnd(lines, lastK, lastV)
		indent := strings.Repeat(" ", secVal.Content[0].Column-1)
		return appendLines(lines, eol, end+1, indent+key+": "+val), true, nil
	}
	return replaceValue(lines, kn, vn, val)
}

// replaceValue replaces the value vn of the key kn in lines with the YAML
// text val, keeping the key line's comment.
func replaceValue(lines []string, kn, vn *yaml.Node, val string) (out []byte, ok bool, err error) {
	if kn.Line < 1 || kn.Line > len(lines) {
		return nil, false, nil
	}
	li := kn.Line - 1
	end := entryEnd(lines, kn, vn)
	content := strings.TrimRight(lines[li], "\r\n")
	lineEnd := lines[end][len(strings.TrimRight(lines[end], "\r\n")):]
	emptyVal := vn.Kind == yaml.ScalarNode && vn.Tag == "!!null" && vn.Value == ""
	onKeyLine := !emptyVal && vn.Line == kn.Line
	if onKeyLine && end == li {
		start := runeColToByte(content, vn.Column)
		stop := scanValueEnd(content, start)
		if stop < 0 {
			return nil, false, nil
		}
		lines[li] = content[:start] + val + content[stop:] + lineEnd
		return []byte(strings.Join(lines, "")), true, nil
	}
	// The value is empty or spans several lines: rebuild the key line,
	// keeping its comment, and drop the value's other lines.
	var prefix string
	comment := ""
	from := runeColToByte(content, kn.Column)
	if c := findComment(content, from); c >= 0 {
		comment = content[c:]
		content = content[:c]
	}
	if onKeyLine {
		prefix = content[:runeColToByte(content, vn.Column)]
	} else {
		prefix = content
	}
	line := strings.TrimRight(prefix, " \t") + " " + val
	if comment != "" {
		line += " " + comment
	}
	rest := append([]string{line + lineEnd}, lines[end+1:]...)
	lines = append(lines[:li], rest...)
	return []byte(strings.Join(lines, "")), true, nil
}

// childStep returns the indentation step used below the top level (the
// indent of the first key of a nested block mapping), 2 if there is none.
func childStep(root *yaml.Node) int {
	base := root.Content[0].Column
	for i := 1; i < len(root.Content); i += 2 {
		v := root.Content[i]
		if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 {
			if d := v.Content[0].Column - base; d > 0 {
				return d
			}
		}
	}
	return 2
}

// entryEnd returns the index of the last line of the entry key: val: the
// last line holding a node of val, extended over following lines indented
// deeper than the key (continuations of block or multi-line scalars).
// Comment and blank lines after the value are not part of it.
func entryEnd(lines []string, key, val *yaml.Node) int {
	end := key.Line - 1
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil {
			return
		}
		if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "") && n.Line-1 > end {
			end = n.Line - 1
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(val)
	keyIndent := key.Column - 1
	for j := end + 1; j < len(lines); j++ {
		c := strings.TrimRight(lines[j], "\r\n")
		t := strings.TrimLeft(c, " \t")
		if t == "" || t[0] == '#' {
			continue
		}
		if len(c)-len(t) <= keyIndent {
			break
		}
		end = j
	}
	return min(end, len(lines)-1)
}

// splitLines splits s into lines that keep their line ends.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// appendLines inserts new lines before index at, making sure the line
// before them is terminated.
func appendLines(lines []string, eol string, at int, add ...string) []byte {
	at = min(at, len(lines))
	if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
		lines[at-1] += eol
	}
	var b strings.Builder
	for _, l := range lines[:at] {
		b.WriteString(l)
	}
	for _, l := range add {
		b.WriteString(l + eol)
	}
	for _, l := range lines[at:] {
		b.WriteString(l)
	}
	return []byte(b.String())
}

// runeColToByte converts a 1-based character column to a byte offset.
func runeColToByte(s string, col int) int {
	n := 1
	for i := range s {
		if n == col {
			return i
		}
		n++
	}
	return len(s)
}

// scanValueEnd returns the byte offset just after the YAML value starting at
// s[i] (a quoted, flow or plain scalar on one line), -1 if it does not end
// on this line.
func scanValueEnd(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"', '\'':
		return quotedEnd(s, i)
	case '[', '{':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"', '\'':
				e := quotedEnd(s, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return j + 1
				}
			case '#':
				if s[j-1] == ' ' || s[j-1] == '\t' {
					return -1
				}
			}
		}
		return -1
	}
	end := commentStart(s, i)
	if end < 0 {
		end = len(s)
	}
	return len(strings.TrimRight(s[:end], " \t"))
}

// quotedEnd returns the offset after the quoted scalar starting at s[i].
func quotedEnd(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case q == '"' && s[j] == '\\':
			j++
		case s[j] == q && q == '\'' && j+1 < len(s) && s[j+1] == '\'':
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return -1
}

// findComment returns the offset of the comment on a YAML line, searching
// from offset from and skipping quoted scalars; -1 if there is none.
func findComment(s string, from int) int {
	for j := from; j < len(s); j++ {
		switch s[j] {
		case '"', '\'':
			if j == from || strings.IndexByte(" \t[{,:", s[j-1]) >= 0 {
				e := quotedEnd(s, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			}
		case '#':
			if j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
				return j
			}
		}
	}
	return -1
}
