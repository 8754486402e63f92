package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/a55dbaac/berth/backend"
	gossh "golang.org/x/crypto/ssh"
)

// Doctor checks that the configured host can be reached, that a key is
// accepted and that `true` runs there, and says what to do when not.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		return backend.Fingerprint{Summary: err.Error(), Fix: fixFor(err)}
	}
	defer b.Close(context.Background())
	fp := backend.Fingerprint{}
	if route := routeString(b.t); route != "direct" {
		fp.Details = append(fp.Details, "route: "+route)
	}
	if len(b.t.unsupported) > 0 {
		fp.Details = append(fp.Details, fmt.Sprintf("~/.ssh/config directives ignored for %s: %v", b.t.alias, b.t.unsupported))
	}
	start := time.Now()
	c, err := b.pick(ctx)
	if err != nil {
		fp.Summary = err.Error()
		fp.Fix = fixFor(err)
		return fp
	}
	connected := time.Since(start)
	fp.Details = append(fp.Details,
		fmt.Sprintf("server %s, host key %s %s", c.version, c.hostKey.Type(), gossh.FingerprintSHA256(c.hostKey)),
		fmt.Sprintf("connected and authenticated in %s", connected.Round(time.Millisecond)),
		fmt.Sprintf("known hosts: %s", b.t.knownHosts[0]))
	if c.newHost {
		fp.Details = append(fp.Details, "host key was new and has been recorded (accept-new)")
	}
	start = time.Now()
	p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"true"}})
	if err != nil {
		fp.Summary = fmt.Sprintf("connected to %s but cannot start a command: %v", b.t, err)
		fp.Fix = "check that the remote account has a working POSIX login shell"
		return fp
	}
	defer p.Close()
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	code, err := p.Wait()
	if err != nil || code != 0 {
		fp.Summary = fmt.Sprintf("connected to %s but `true` failed: status %d %v", b.t, code, err)
		fp.Fix = "check the remote account's login shell and its startup files (they must not fail or print to a non-terminal)"
		return fp
	}
	fp.Usable = true
	fp.Summary = fmt.Sprintf("%s reachable (%s); `true` ran in %s", b.t, c.version, time.Since(start).Round(100*time.Microsecond))
	return fp
}

// fixFor suggests what to do about a connection error.
func fixFor(err error) string {
	var ce *ConfigError
	var ue *backend.UnreachableError
	var ae *AuthError
	var hc *HostKeyChangedError
	var hu *HostKeyUnknownError
	var he *HopError
	var pe *ProxyCommandError
	if errors.As(err, &he) {
		return fmt.Sprintf("the jump host %s failed (see above): %s; check terminal.ssh_proxy_jump (TERMINAL_SSH_PROXY_JUMP) or the ProxyJump line and the jump host's entry in ~/.ssh/config",
			he.Hop, fixFor(he.Err))
	}
	if errors.As(err, &pe) {
		return "run the proxy command by hand to see what it needs; check terminal.ssh_proxy_command (TERMINAL_SSH_PROXY_COMMAND) or the ProxyCommand line in ~/.ssh/config"
	}
	switch {
	case errors.As(err, &ce):
		return "set the missing or malformed setting shown above"
	case errors.As(err, &ue):
		return "make sure the host is up and sshd listens on that port; check terminal.ssh_host / ssh_port (TERMINAL_SSH_HOST / TERMINAL_SSH_PORT) and ~/.ssh/config"
	case errors.As(err, &ae):
		return "set terminal.ssh_key (TERMINAL_SSH_KEY) to a private key authorized on the server, or add the key to ssh-agent; passwords and passphrase prompts are not supported"
	case errors.As(err, &hc):
		return fmt.Sprintf("verify the new key with the host's administrator; if it is genuine, run ssh-keygen -R '%s' and retry", hc.Host)
	case errors.As(err, &hu):
		return "record the host key first (ssh-keyscan) or relax StrictHostKeyChecking for this host in ~/.ssh/config"
	}
	return "run `ssh -v` with the same host, user and key to see what the server says"
}
