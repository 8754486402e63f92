package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/berthhome"
)

// The local backend's configuration keys (berth's own; Hermes has no
// kernel confinement). See README.md in this directory.
const (
	keySandbox     = "local_sandbox"
	keyWritable    = "local_sandbox_writable"
	keyNetwork     = "local_sandbox_network"
	keyUnixSockets = "local_sandbox_unix_sockets"
	keyFallback    = "local_sandbox_fallback"
)

// Sandbox modes (terminal.local_sandbox).
const (
	SandboxOff       = "off"
	SandboxWorkspace = "workspace"
)

// Fallbacks (terminal.local_sandbox_fallback): what berth does where the
// kernel cannot enforce the workspace mode.
const (
	FallbackRefuse  = "refuse"
	FallbackPartial = "partial"
	FallbackOff     = "off"
)

func oneOf(choices ...string) func(any) error {
	return func(v any) error {
		if slices.Contains(choices, v.(string)) {
			return nil
		}
		return fmt.Errorf("use %s", strings.Join(choices, ", "))
	}
}

// checkWritable accepts absolute paths and paths under ~/.
func checkWritable(v any) error {
	for _, p := range v.([]string) {
		if !filepath.IsAbs(p) && p != "~" && !strings.HasPrefix(p, "~/") {
			return fmt.Errorf("%q is not an absolute path (or one under ~/)", p)
		}
	}
	return nil
}

var configKeys = []config.Key{
	{Name: keySandbox, Default: SandboxOff, Check: oneOf(SandboxOff, SandboxWorkspace),
		Help: "berth: off, or workspace: the kernel lets commands write only under the working directory, their temp directory and local_sandbox_writable, and signal only their own processes"},
	{Name: keyWritable, Default: []string{}, Check: checkWritable,
		Help: `berth: more directory trees commands may write in workspace mode, e.g. ["~/.cache", "/dev/shm"]`},
	{Name: keyNetwork, Default: string(confine.NetworkAll), Check: oneOf(string(confine.NetworkAll), string(confine.NetworkLoopback), string(confine.NetworkNone)),
		Help: "berth: network in workspace mode: all, loopback (TCP to 127.0.0.1/::1 only) or none"},
	{Name: keyUnixSockets, Default: false,
		Help: "berth: let workspace-mode commands use unix sockets, and so ask any daemon listening on one (docker, D-Bus, tmux) to act for them"},
	{Name: keyFallback, Default: FallbackRefuse, Check: oneOf(FallbackRefuse, FallbackPartial, FallbackOff),
		Help: "berth: where the kernel cannot enforce workspace mode: refuse to run, run partial (what it can enforce), or off (unconfined)"},
}

// confineNew makes the confinement (tests pretend to be another kernel).
var confineNew = confine.New

// sandbox is the kernel confinement of one local environment.
type sandbox struct {
	domain   *confine.Domain
	tmp      string // the environment's private temporary directory
	conf     backend.Confinement
	isolated bool // the kernel holds writes to conf.Writable: IsolationWorkspace
}

// newSandbox confines the environment whose working directory is dir as
// opts asks. It returns nil for mode off, and for fallback off where the
// kernel cannot enforce the mode (after saying so in the log).
func newSandbox(dir string, opts backend.Options, log *slog.Logger) (*sandbox, error) {
	t := opts.Config
	if t.String(keySandbox) != SandboxWorkspace {
		return nil, nil
	}
	fallback := t.String(keyFallback)
	network, err := confine.ParseNetwork(t.String(keyNetwork))
	if err != nil {
		return nil, fmt.Errorf("local: terminal.%s: %w", keyNetwork, err)
	}
	writable, err := writableTrees(dir, opts)
	if err != nil {
		return nil, err
	}
	for _, w := range broadTrees(writable, userHome(opts)) {
		log.Warn("local: " + w)
	}
	g, err := guardFor(writable, opts, true)
	if err != nil {
		return nil, err
	}
	if len(g.unprotected) > 0 {
		log.Debug("local: not kept read-only by the kernel (the approvals gate asks about writes to them)", "paths", strings.Join(g.unprotected, "; "))
	}
	tmp, err := os.MkdirTemp("", "berth-sandbox-")
	if err != nil {
		return nil, fmt.Errorf("local: the environment's temporary directory: %w", err)
	}
	pol := confine.Policy{
		Writable:    append(writable, tmp),
		ReadOnly:    g.readOnly,
		Pinned:      g.pinned,
		Network:     network,
		UnixSockets: t.Bool(keyUnixSockets),
		Partial:     fallback == FallbackPartial,
	}
	d, err := confineNew(pol)
	var unsup *confine.UnsupportedError
	switch {
	case errors.As(err, &unsup) && fallback == FallbackOff:
		os.RemoveAll(tmp)
		log.Warn("local: workspace confinement cannot be enforced here; running UNCONFINED as terminal.local_sandbox_fallback=off asks",
			"missing", strings.Join(unsup.Missing, "; "))
		return nil, nil
	case errors.As(err, &unsup):
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("local: terminal.%s=workspace cannot be enforced on this kernel: %s. berth refuses to run unconfined; set terminal.%s to partial (enforce what this kernel can) or off (run unconfined), or run in a container (terminal.backend docker)",
			keySandbox, strings.Join(unsup.Missing, "; "), keyFallback)
	case err != nil:
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("local: workspace confinement: %w", err)
	}
	e := d.Enforced()
	if len(e.Missing) > 0 {
		log.Warn("local: workspace confinement is partial on this kernel (terminal.local_sandbox_fallback=partial)",
			"missing", strings.Join(e.Missing, "; "))
	}
	sb := &sandbox{domain: d, tmp: tmp, conf: backend.Confinement{Writable: e.Writable, Protected: e.ReadOnly, Signals: e.Signals},
		// A daemon reachable over a unix socket (docker, systemd over
		// D-Bus) writes wherever a command asks it to: with those open,
		// the writable trees are not the whole truth.
		isolated: e.Writable != nil && e.UnixConfined}
	if e.Network != confine.NetworkAll {
		sb.conf.Network = string(e.Network)
	}
	return sb, nil
}

// writableTrees returns the trees commands may write in the workspace
// dir: dir itself and local_sandbox_writable, each checked.
func writableTrees(dir string, opts backend.Options) ([]string, error) {
	t := opts.Config
	if dir == "/" {
		return nil, fmt.Errorf("local: terminal.%s=workspace with / as the working directory would let commands write everywhere; set terminal.cwd to the project's directory", keySandbox)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("local: terminal.%s=workspace needs the working directory %s to exist: it is the tree commands may write", keySandbox, dir)
	}
	home := userHome(opts)
	writable := []string{dir}
	for _, p := range t.List(keyWritable) {
		if p == "~" || strings.HasPrefix(p, "~/") {
			if home == "" {
				return nil, fmt.Errorf("local: terminal.%s: %q: no home directory to expand ~ in", keyWritable, p)
			}
			p = filepath.Join(home, p[1:])
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("local: terminal.%s: %q is not an existing directory", keyWritable, p)
		}
		writable = append(writable, filepath.Clean(p))
	}
	return writable, nil
}

// userHome is the user's home directory ($HOME as berth was started), ""
// when there is none.
func userHome(opts backend.Options) string {
	home := ""
	if opts.Getenv != nil {
		home = opts.Getenv("HOME")
	}
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return home
}

// broadTrees warns about writable trees that hand commands more than a
// project (R10 of the 2026-11-28 review): the user's home, whose startup
// files and configuration run unconfined later, and the shared temporary
// directory.
func broadTrees(writable []string, home string) []string {
	var out []string
	if home != "" {
		home = berthhome.RealPath(home)
	}
	for _, w := range writable {
		r := berthhome.RealPath(w)
		switch {
		case home != "" && berthhome.Within(home, r):
			out = append(out, fmt.Sprintf("the writable tree %s holds your home directory: commands may write your shell's startup files (~/.bashrc, ~/.profile), ~/.ssh and ~/.config, which run unconfined when you next log in or use them; set terminal.cwd to the project's directory", w))
		case r == berthhome.RealPath(os.TempDir()) || r == "/tmp" || r == "/var/tmp":
			out = append(out, fmt.Sprintf("the writable tree %s is shared with every user and program on this machine; the environment's own $TMPDIR is private", w))
		}
	}
	return out
}

// guardFor decides what the kernel keeps read-only inside the writable
// trees: berth's own state (refusing to start where that cannot be done)
// and, where a mount namespace can be had, the repositories' hooks and
// configuration. With make, a missing berth home inside a tree is made
// (so that it is protected); doctor passes false.
func guardFor(writable []string, opts backend.Options, make bool) (guard, error) {
	var g guard
	st, err := berthhome.Settings(opts.Home, opts.ConfigFile, opts.Getenv)
	if err != nil {
		return g, fmt.Errorf("local: berth's settings, which workspace mode keeps out of the commands' reach: %w", err)
	}
	s := confine.Probe()
	why := "berth keeps it read-only with a mount namespace, which it cannot make here: " + s.NoMountNS
	if err := g.berthState(st, writable, s.MountNS, why, make); err != nil {
		return g, err
	}
	if s.MountNS {
		g.repositories(writable)
	} else {
		g.unprotected = append(g.unprotected, "every repository's .git (no mount namespace here: "+s.NoMountNS+")")
	}
	return g, nil
}

// close ends the confinement and removes the temporary directory.
func (s *sandbox) close() {
	s.domain.Close()
	os.RemoveAll(s.tmp)
}

// withTmp returns env with TMPDIR set to dir.
func withTmp(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TMPDIR=") {
			out = append(out, kv)
		}
	}
	return append(out, "TMPDIR="+dir)
}
