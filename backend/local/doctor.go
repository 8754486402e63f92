package local

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local/confine"
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
	fp.Details = append(fp.Details, "local_sandbox=off: no kernel confinement; the approvals gate reads each command")

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
	switch {
	case mode != SandboxWorkspace:
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
	fp.Details = append(fp.Details, configured)
	return fp
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
	switch {
	case p.UnixSockets:
		off = append(off, "unix sockets (local_sandbox_unix_sockets: true)")
	case s.Seccomp || s.ABI >= 9:
		on = append(on, "no unix sockets to daemons outside")
	default:
		off = append(off, "unix sockets")
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
