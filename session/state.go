package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/internal/shparse"
)

// State is the part of a shell's state that a fork, a checkpoint or a
// restore carries into a new environment (Hold captures it from the live
// shell, Replay sets it in another). It is the state a command can change
// and the next command sees: the working directory, the exported
// variables the commands set, changed or unset, the umask and, on bash,
// the functions, aliases and shell options. Non-exported shell variables,
// traps, the directory stack and jobs are not part of it; background
// processes never are.
//
// Exported variables are those whose value differs from what a new shell
// of the environment starts with (its initial environment, and the
// variables the session itself exports: forwarded secrets and berth's
// pager settings), so a new environment keeps its own TMPDIR, HOSTNAME and
// credentials, and a secret the backend forwards is never part of a
// State. A variable a command exported itself is, value included: a State
// is stored in berth's home (mode 0600) when it belongs to a named
// checkpoint.
type State struct {
	// Shell is "bash" or "sh" (POSIX sh: no functions, aliases or
	// options are carried).
	Shell string `json:"shell"`
	// Cwd is the shell's working directory.
	Cwd string `json:"cwd,omitempty"`
	// Env are the exported variables the commands set or changed;
	// Exported the names exported without a value (export NAME); Unset
	// the names of the initial environment the commands unset.
	Env      map[string]string `json:"env,omitempty"`
	Exported []string          `json:"exported,omitempty"`
	Unset    []string          `json:"unset,omitempty"`
	// Umask is the shell's umask, in octal ("0022").
	Umask string `json:"umask,omitempty"`
	// Functions and Aliases are the definitions as declare -f and alias
	// -p print them (bash), berth's own helpers left out.
	Functions string `json:"functions,omitempty"`
	Aliases   string `json:"aliases,omitempty"`
	// Options are the shell options, one "shopt -s NAME", "shopt -u
	// NAME", "set -o NAME" or "set +o NAME" a line (bash).
	Options string `json:"options,omitempty"`
}

// FunctionNames returns the names of the functions st defines, sorted.
func (st State) FunctionNames() []string {
	var out []string
	if f := parseBash(st.Functions); f != nil {
		for _, s := range f.Stmts {
			if fd, ok := s.Cmd.(*syntax.FuncDecl); ok && fd.Name != nil {
				out = append(out, fd.Name.Value)
			}
		}
	}
	sort.Strings(out)
	return out
}

// AliasNames returns the names of the aliases st defines, sorted.
func (st State) AliasNames() []string {
	var out []string
	for _, a := range aliasArgs(st.Aliases) {
		name, _, _ := strings.Cut(a, "=")
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// VariableNames returns the names of the exported variables st sets,
// exports without a value or unsets, sorted.
func (st State) VariableNames() []string {
	out := make([]string, 0, len(st.Env)+len(st.Exported)+len(st.Unset))
	for k := range st.Env {
		out = append(out, k)
	}
	out = append(out, st.Exported...)
	out = append(out, st.Unset...)
	sort.Strings(out)
	return out
}

// ErrBusy is wrapped by the error of Hold when a command of the session
// was still running when the wait ended.
var ErrBusy = errors.New("session: a command is running")

// Hold waits until no command of the session runs — at most wait, and
// never past ctx — captures the shell's state from the live shell
// (starting one if none runs), and calls fn with it while no command can
// start, so that what fn copies (the environment's files) matches the
// state. A command still running when the wait ends is an error wrapping
// ErrBusy; Hold never captures under a running command. Background
// processes (StartDetached, handed-off commands) are not waited for.
func (s *Session) Hold(ctx context.Context, wait time.Duration, fn func(State) error) error {
	if err := s.lockWithin(ctx, wait); err != nil {
		return err
	}
	defer s.mu.Unlock()
	st, err := s.captureLocked(ctx)
	if err != nil {
		return err
	}
	return fn(st)
}

// WaitIdle waits until no command of the session runs, at most wait and
// never past ctx; a command still running then is an error wrapping
// ErrBusy. A command may start again as soon as it returns.
func (s *Session) WaitIdle(ctx context.Context, wait time.Duration) error {
	if err := s.lockWithin(ctx, wait); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// lockWithin takes s.mu, waiting at most wait and never past ctx.
func (s *Session) lockWithin(ctx context.Context, wait time.Duration) error {
	if s.mu.TryLock() {
		return nil
	}
	got := make(chan struct{})
	go func() {
		s.mu.Lock()
		close(got)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	var why error
	select {
	case <-got:
		return nil
	case <-t.C:
		why = fmt.Errorf("%w: still running after %s", ErrBusy, wait.Round(time.Millisecond))
	case <-ctx.Done():
		why = fmt.Errorf("%w: still running when the call ended (%w)", ErrBusy, ctx.Err())
	}
	// The lock is taken later all the same: give it back at once.
	go func() {
		<-got
		s.mu.Unlock()
	}()
	return why
}

// captureLocked reads the state of the running shell. Callers hold s.mu.
func (s *Session) captureLocked(ctx context.Context) (State, error) {
	if err := s.ensure(ctx); err != nil {
		return State{}, err
	}
	bash := s.sh.bash
	sep := "__berth_state_" + nonce()
	out, err := s.runLocked(ctx, captureScript(bash, sep))
	if err != nil {
		return State{}, fmt.Errorf("session: read the shell's state on %s: %w", s.be.Name(), err)
	}
	return parseCapture(out, sep, bash, s.cwd, s.ownEnv())
}

// runLocked runs one command of berth's own in the shell, with no stdin,
// and returns its output. Callers hold s.mu and have a shell (ensure).
func (s *Session) runLocked(ctx context.Context, command string) (string, error) {
	sh := s.sh
	n := lineNonce()
	line := commandLine(sh.bash, n, "", "", "</dev/null", command, "0", "")
	var out bytes.Buffer
	res, err, ran := s.runOnce(ctx, sh, n, "0", line, nil, Request{}, &out)
	switch {
	case err != nil:
		return "", err
	case !ran || res.ShellExited:
		return "", fmt.Errorf("%w: the shell ended before it answered", ErrShellLost)
	case res.Interrupted:
		return "", fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return out.String(), nil
}

// ownEnv is what the session itself exports into every shell: its Env
// (forwarded secrets among them) and berth's pager settings. Variables
// with these values are not part of a State.
func (s *Session) ownEnv() map[string]string {
	own := map[string]string{"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
	for k, v := range s.opts.Env {
		own[k] = v
	}
	return own
}

// captureScript prints, separated by lines holding sep: export -p, then
// on bash declare -f, alias -p and the shell options, then the umask and
// the shell's initial environment (/proc/$$/environ, NUL-separated).
// Builtins are called so that no alias or function of the user's can
// stand in for them, traces and errors go nowhere, and nothing fails
// under set -e.
func captureScript(bash bool, sep string) string {
	q := shellword.Quote(sep)
	if bash {
		s := `\builtin printf '\n%s\n' ` + q + `; `
		return `{ \builtin export -p; ` + s +
			`\builtin declare -f; ` + s +
			`\builtin alias -p; ` + s +
			`\builtin shopt -p; \builtin set +o; ` + s +
			`\builtin umask; ` + s +
			`\builtin command cat /proc/$$/environ || \builtin true; } 2>/dev/null`
	}
	s := `\command printf '\n%s\n' ` + q + `; `
	return `{ \export -p; ` + s + `\command umask; ` + s + `\command cat /proc/$$/environ || \command true; } 2>/dev/null`
}

// bashManaged are variables bash sets by itself: not carried.
var bashManaged = map[string]bool{"PWD": true, "SHLVL": true, "_": true}

// initUnset are variables berth's init script unsets: their absence is
// not the user's doing.
var initUnset = map[string]bool{"__berth_init": true, "HISTFILE": true, "PROMPT_COMMAND": true}

// parseCapture builds a State from captureScript's output.
func parseCapture(out, sep string, bash bool, cwd string, own map[string]string) (State, error) {
	parts := strings.Split(out, "\n"+sep+"\n")
	want := 3
	if bash {
		want = 6
	}
	if len(parts) != want {
		return State{}, fmt.Errorf("session: the shell's state came back in %d parts, not %d (did a trap or a function print during the capture?)", len(parts), want)
	}
	st := State{Shell: "sh", Cwd: cwd}
	if bash {
		st.Shell = "bash"
	}
	exports, err := parseExports(parts[0])
	if err != nil {
		return State{}, err
	}
	envPart, umask := parts[want-1], strings.TrimSpace(parts[want-2])
	if octal.MatchString(umask) {
		st.Umask = umask
	}
	initial := map[string]string{}
	if strings.Contains(envPart, "=") {
		for _, kv := range strings.Split(envPart, "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				initial[k] = v
			}
		}
	}
	base := map[string]string{}
	for k, v := range initial {
		base[k] = v
	}
	for k, v := range own {
		base[k] = v
	}
	seen := map[string]bool{}
	for _, e := range exports {
		seen[e.name] = true
		if skipVar(e.name) {
			continue
		}
		if e.naked {
			if _, ok := base[e.name]; !ok {
				st.Exported = append(st.Exported, e.name)
			}
			continue
		}
		if v, ok := base[e.name]; ok && v == e.value {
			continue
		}
		if st.Env == nil {
			st.Env = map[string]string{}
		}
		st.Env[e.name] = e.value
	}
	for k := range initial {
		if !seen[k] && !skipVar(k) && !initUnset[k] && envName.MatchString(k) {
			st.Unset = append(st.Unset, k)
		}
	}
	sort.Strings(st.Exported)
	sort.Strings(st.Unset)
	if bash {
		st.Functions = userDefinitions(parts[1])
		var aliases []string
		for _, a := range aliasArgs(parts[2]) {
			aliases = append(aliases, "alias "+a+"\n")
		}
		st.Aliases = strings.Join(aliases, "")
		st.Options = strings.Join(optionLines(parts[3]), "\n")
	}
	return st, nil
}

// skipVar reports variables no State carries: the session's mark, bash's
// own, berth's helpers'.
func skipVar(name string) bool {
	return name == TreeVar || bashManaged[name] || strings.HasPrefix(name, "__berth_")
}

var octal = regexp.MustCompile(`^0?[0-7]{3}$`)

type exported struct {
	name, value string
	naked       bool
}

// parseExports reads export -p output (bash's declare -x lines or a POSIX
// shell's export lines) into names and values.
func parseExports(text string) ([]exported, error) {
	f := parseBash(text)
	if f == nil {
		return nil, errors.New("session: cannot read the shell's exported variables (export -p)")
	}
	var out []exported
	for _, s := range f.Stmts {
		d, ok := s.Cmd.(*syntax.DeclClause)
		if !ok {
			continue
		}
		for _, a := range d.Args {
			if a.Name == nil || !envName.MatchString(a.Name.Value) {
				continue
			}
			if a.Naked || a.Value == nil {
				out = append(out, exported{name: a.Name.Value, naked: a.Naked})
				continue
			}
			v, err := expand.Literal(nil, a.Value)
			if err != nil {
				return nil, fmt.Errorf("session: the value of exported variable %s: %w", a.Name.Value, err)
			}
			out = append(out, exported{name: a.Name.Value, value: v})
		}
	}
	return out, nil
}

// parseBash parses text as bash through shparse's bounds (the live
// shell's declare -f and alias -p output is the agent's text), nil when
// it does not parse or is past them.
func parseBash(text string) *syntax.File {
	f, err := shparse.Parse(text)
	if err != nil {
		return nil
	}
	return f
}

// aliasArgs returns the NAME=VALUE words of alias -p output, as shell
// text (VALUE still quoted), one per alias.
func aliasArgs(text string) []string {
	f := parseBash(text)
	if f == nil {
		return nil
	}
	var out []string
	for _, s := range f.Stmts {
		c, ok := s.Cmd.(*syntax.CallExpr)
		if !ok || len(c.Args) < 2 || c.Args[0].Lit() != "alias" {
			continue
		}
		for _, w := range c.Args[1:] {
			from, to := int(w.Pos().Offset()), int(w.End().Offset())
			if from < 0 || from > to || to > len(text) {
				continue
			}
			word := text[from:to]
			if name, _, ok := strings.Cut(word, "="); ok && aliasName.MatchString(name) {
				out = append(out, word)
			}
		}
	}
	return out
}

var (
	aliasName  = regexp.MustCompile(`^[A-Za-z0-9_.:@%+,-]+$`)
	optionLine = regexp.MustCompile(`^(shopt -[su]|set [-+]o) ([a-z_-]+)$`)
)

// skipOptions are shell options a State does not carry: those of an
// interactive shell, those no shell may set, and noexec, under which a
// shell reads commands without running them.
var skipOptions = map[string]bool{
	"noexec": true, "monitor": true, "history": true, "emacs": true, "vi": true, "onecmd": true,
	"login_shell": true, "restricted_shell": true,
}

// optionLines keeps the option lines of shopt -p and set +o output.
func optionLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		m := optionLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil || skipOptions[m[2]] {
			continue
		}
		out = append(out, m[0])
	}
	return out
}

// Script returns the shell text that sets st in a new shell of kind bash
// (true) or sh: exported variables and unset ones, the umask, the working
// directory (mapped through relocate, as are exported values that are
// absolute paths or colon-separated lists of them; nil maps nothing),
// then on bash the functions, the aliases and, last, the shell options
// (set -e included). Builtins are called so that the functions and
// aliases it defines cannot stand in for them.
func (st State) Script(bash bool, relocate func(string) string) string {
	if relocate == nil {
		relocate = func(p string) string { return p }
	}
	var b strings.Builder
	bi := `\builtin `
	if !bash {
		bi = `\command `
	}
	names := make([]string, 0, len(st.Env))
	for k := range st.Env {
		if envName.MatchString(k) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString(`\export ` + k + "=" + shellword.Quote(relocateList(st.Env[k], relocate)) + "\n")
	}
	for _, k := range st.Exported {
		if envName.MatchString(k) {
			b.WriteString(`\export ` + k + "\n")
		}
	}
	for _, k := range st.Unset {
		if envName.MatchString(k) {
			b.WriteString(`\unset ` + k + "\n")
		}
	}
	if octal.MatchString(st.Umask) {
		b.WriteString(bi + "umask " + st.Umask + "\n")
	}
	if st.Cwd != "" {
		b.WriteString(`\__berth_cd ` + shellword.Quote(relocate(st.Cwd)) + "\n")
	}
	if !bash {
		return b.String()
	}
	if st.Functions != "" {
		b.WriteString(st.Functions)
		if !strings.HasSuffix(st.Functions, "\n") {
			b.WriteByte('\n')
		}
	}
	for _, a := range aliasArgs(st.Aliases) {
		b.WriteString(bi + "alias " + a + "\n")
	}
	for _, l := range optionLines(st.Options) {
		b.WriteString(bi + l + "\n")
	}
	return b.String()
}

// relocateList maps v through relocate when it is an absolute path or a
// colon-separated list with absolute paths in it (PATH, VIRTUAL_ENV).
func relocateList(v string, relocate func(string) string) string {
	if !strings.HasPrefix(v, "/") && !strings.Contains(v, ":/") {
		return v
	}
	parts := strings.Split(v, ":")
	for i, p := range parts {
		if strings.HasPrefix(p, "/") {
			parts[i] = relocate(p)
		}
	}
	return strings.Join(parts, ":")
}

// Replay sets st in the session's shell, starting one if none runs (see
// Script), and records the result as the session's state (the snapshot
// a restarted shell is restored from, the definitions the approval gate
// reads). The output of the replay, if any, goes to the log: a readonly
// variable or an option this shell lacks does not stop it. The shell kind
// is the session's own: a bash State replayed in sh carries its cwd,
// exported variables and umask only.
func (s *Session) Replay(ctx context.Context, st State, relocate func(string) string) error {
	s.mu.Lock()
	if err := s.ensure(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	bash := s.sh.bash
	s.mu.Unlock()
	script := st.Script(bash, relocate)
	if script == "" {
		return nil
	}
	var out bytes.Buffer
	res, err := s.Run(ctx, Request{Command: "{\n" + script + "} 2>&1"}, &out)
	if err != nil {
		return fmt.Errorf("session: restore the shell's state on %s: %w", s.be.Name(), err)
	}
	if res.ShellExited {
		return fmt.Errorf("session: restore the shell's state on %s: the shell ended (status %d): %s", s.be.Name(), res.ExitCode, strings.TrimSpace(out.String()))
	}
	if out.Len() > 0 {
		s.log.Debug("session: restoring the shell's state printed", "backend", s.be.Name(), "output", out.String())
	}
	return nil
}
