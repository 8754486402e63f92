package local

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/internal/berthhome"
)

// doctor reports the shell, the Landlock ABI and seccomp support found,
// what each sandbox mode enforces on this machine, and whether the
// configured mode can run.
func doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	sh := "sh"
	if p, err := exec.LookPath("bash"); err == nil {
		sh = p
	} else if _, err := exec.LookPath("sh"); err != nil {
		return backend.Fingerprint{Usable: false, Summary: "no sh or bash on PATH", Fix: "install bash or a POSIX sh"}
	}
	fp := backend.Fingerprint{Usable: true, Summary: "shell " + sh}
	s := confine.Probe()
	fp.Details = append(fp.Details, kernelLine(s))
	fp.Details = append(fp.Details, "local_sandbox=off: no kernel confinement: a command runs as you and may change any file you may, berth's own settings included, so the approvals gate catches mistakes and known model habits, not a determined agent; local_sandbox: workspace (or a container backend) has the kernel hold the line")

	t := opts.Config
	network, _ := confine.ParseNetwork(t.String(keyNetwork))
	unixOK := t.Bool(keyUnixSockets)
	want := confine.Policy{Network: network, UnixSockets: unixOK}
	missing := s.Missing(want)
	fp.Details = append(fp.Details, "local_sandbox=workspace here: "+workspaceLine(s, want))
	mode := t.String(keySandbox)
	fallback := t.String(keyFallback)
	configured := fmt.Sprintf("configured: local_sandbox=%s", mode)
	if mode == SandboxWorkspace {
		configured += fmt.Sprintf(", network=%s, unix_sockets=%t, fallback=%s", network, unixOK, fallback)
	}
	var state []string
	var stateErr error
	if mode == SandboxWorkspace {
		state, stateErr = workspaceState(opts, s)
	}
	switch {
	case mode != SandboxWorkspace:
	case stateErr != nil:
		configured += ": CANNOT start here: " + stateErr.Error()
		fp.Usable = false
		fp.Fix = "set terminal.cwd to the project's directory, or BERTH_HOME (and BERTH_CONFIG) outside the workspace"
	case len(missing) == 0:
		configured += ": enforced in full"
	case fallback == FallbackRefuse:
		configured += ": CANNOT be enforced here (" + strings.Join(missing, "; ") + "); berth refuses to start local environments"
		fp.Usable = false
		fp.Fix = "use a kernel with Landlock ABI 6 (Linux 6.12) or later, or set terminal.local_sandbox_fallback to partial or off, or terminal.backend docker"
	case fallback == FallbackPartial:
		configured += ": PARTIAL here, not enforced: " + strings.Join(missing, "; ")
	default:
		configured += ": cannot be enforced here; environments run UNCONFINED (fallback off): " + strings.Join(missing, "; ")
	}
	fp.Details = append(fp.Details, state...)
	fp.Details = append(fp.Details, configured)
	return fp
}

// workspaceState says, for the configured workspace, where berth's own
// state and the repositories lie and what the kernel does about them
// here; an error when berth would refuse to start.
func workspaceState(opts backend.Options, s confine.Support) ([]string, error) {
	dir, err := workDir(opts)
	if err != nil {
		return nil, err
	}
	writable, err := writableTrees(dir, opts)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, w := range broadTrees(writable, userHome(opts)) {
		lines = append(lines, "WARNING: "+w)
	}
	g, err := guardFor(writable, opts, false)
	if err != nil {
		return lines, err
	}
	st, _ := berthhome.Settings(opts.Home, opts.ConfigFile, opts.Getenv)
	ws := "workspace " + strings.Join(writable, ", ")
	switch {
	case g.home != "":
		lines = append(lines, fmt.Sprintf("%s: berth's home %s is inside it: kept read-only to commands by a mount namespace", ws, st.Home))
	default:
		lines = append(lines, fmt.Sprintf("%s: berth's home %s is outside it: read-only to commands", ws, st.Home))
	}
	if g.config != "" {
		lines = append(lines, fmt.Sprintf("berth's config file %s and the .env beside it are inside the workspace: kept read-only by a mount namespace", st.Config))
	}
	lines = append(lines, checkpointLine(st.Home, dir))
	if s.MountNS {
		lines = append(lines, fmt.Sprintf(".git/hooks, .git/config, config.worktree and commondir of the %d git directories found in the workspace (repositories, their submodules and linked worktrees): kept read-only by a mount namespace; a name that does not exist yet, and a repository made later or past the search bound, are not, and the approvals gate asks about writes to them", len(g.pinned)))
	} else {
		lines = append(lines, ".git/hooks and .git/config in the workspace: NOT kept read-only here (a mount namespace needs berth to run as root): the approvals gate asks about writes to them")
	}
	return lines, nil
}

// kernelLine names what the kernel offers.
func kernelLine(s confine.Support) string {
	var b strings.Builder
	if s.ABI == 0 {
		b.WriteString("Landlock: none (" + s.NoLandlock + ")")
	} else {
		fmt.Fprintf(&b, "Landlock ABI %d:", s.ABI)
		var have []string
		have = append(have, "filesystem writes")
		if s.ABI >= 3 {
			have = append(have, "truncate")
		}
		if s.ABI >= 4 {
			have = append(have, "TCP bind/connect")
		}
		if s.ABI >= 6 {
			have = append(have, "signal and abstract-socket scopes")
		}
		if s.ABI >= 9 {
			have = append(have, "pathname unix sockets")
		}
		b.WriteString(" " + strings.Join(have, ", "))
	}
	if s.Seccomp {
		b.WriteString("; seccomp filters: yes")
	} else {
		b.WriteString("; seccomp filters: no (" + s.NoSeccomp + ")")
	}
	if s.Notify {
		b.WriteString("; loopback supervisor: yes")
	} else {
		b.WriteString("; loopback supervisor: no (" + s.NoNotify + ")")
	}
	return b.String()
}

// workspaceLine says what workspace mode enforces here for p.
func workspaceLine(s confine.Support, p confine.Policy) string {
	var on, off []string
	if s.ABI >= 3 {
		on = append(on, "writes, chmod and chown only under the working directory, its temp directory and local_sandbox_writable")
	} else {
		off = append(off, "writes")
	}
	if s.ABI >= 6 {
		on = append(on, "signals and ptrace only within the environment")
	} else {
		off = append(off, "signals")
	}
	if s.Seccomp {
		on = append(on, "no rescheduling, renicing or pinning of processes outside")
	} else {
		off = append(off, "scheduling of other processes")
	}
	switch {
	case p.UnixSockets:
		off = append(off, "unix sockets (local_sandbox_unix_sockets: true)")
	case s.Seccomp || s.ABI >= 9:
		on = append(on, "no unix sockets to daemons outside (stream or datagram)")
	default:
		off = append(off, "unix sockets")
	}
	if s.MountNS {
		on = append(on, "berth's home and config, and repositories' hooks and config inside the workspace, read-only")
	} else {
		off = append(off, "keeping berth's home read-only inside the workspace (berth refuses to start when it lies there) and repositories' hooks and config ("+s.NoMountNS+")")
	}
	if s.Seccomp {
		on = append(on, "no TIOCSTI, no io_uring")
	}
	switch p.Network {
	case confine.NetworkNone:
		if s.Seccomp {
			on = append(on, "no network")
		} else {
			off = append(off, "network none")
		}
	case confine.NetworkLoopback:
		if s.Notify {
			on = append(on, "TCP to loopback only")
		} else {
			off = append(off, "network loopback")
		}
	default:
		on = append(on, "network open (local_sandbox_network: all)")
	}
	line := strings.Join(on, "; ")
	if len(off) > 0 {
		line += "; NOT enforced: " + strings.Join(off, ", ")
	}
	return line
}
