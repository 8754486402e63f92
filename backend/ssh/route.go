package ssh

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// maxJumpHops bounds a route (jump hosts of jump hosts included), which
// also stops a ProxyJump loop in ~/.ssh/config.
const maxJumpHops = 16

// HopError reports that a jump host on the way to the target failed: it
// could not be reached, refused berth's key, presented a wrong host key or
// would not open a tunnel to the next host. Hop names the jump host as
// "name:port" (the name as written in ProxyJump or ssh_proxy_jump). Err is
// the hop's own error (*AuthError, *HostKeyChangedError,
// *backend.UnreachableError, ...), reachable with errors.As.
type HopError struct {
	Hop string
	Err error
}

func (e *HopError) Error() string {
	return "ssh backend: jump host " + e.Hop + ": " + strings.TrimPrefix(e.Err.Error(), "ssh backend: ")
}

func (e *HopError) Unwrap() error { return e.Err }

// hopSpec is one entry of a ProxyJump list: [user@]host[:port], or the same
// as an ssh:// URI.
type hopSpec struct {
	user string
	host string
	port int // 0 when not given
}

// parseJumpList parses a ProxyJump value ("a,user@b:2222,ssh://c"). what
// names where the value came from, for the error.
func parseJumpList(v, what string) ([]hopSpec, error) {
	var hops []hopSpec
	for _, part := range strings.Split(v, ",") {
		h, err := parseHop(strings.TrimSpace(part))
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s %q: %v (want a comma-separated list of [user@]host[:port])", what, v, err)}
		}
		hops = append(hops, h)
	}
	return hops, nil
}

func parseHop(s string) (hopSpec, error) {
	var h hopSpec
	s = strings.TrimPrefix(s, "ssh://")
	s = strings.TrimSuffix(s, "/")
	if s == "" {
		return h, fmt.Errorf("empty host")
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		h.user, s = s[:i], s[i+1:]
		if h.user == "" {
			return h, fmt.Errorf("empty user in %q", s)
		}
	}
	port := ""
	switch {
	case strings.HasPrefix(s, "["): // [v6addr] or [v6addr]:port
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return h, fmt.Errorf("unterminated [ in %q", s)
		}
		h.host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return h, fmt.Errorf("junk %q after ]", rest)
			}
			port = rest[1:]
		}
	case strings.Count(s, ":") == 1:
		h.host, port, _ = strings.Cut(s, ":")
	default: // a name, or a bare IPv6 address
		h.host = s
	}
	if h.host == "" {
		return h, fmt.Errorf("empty host")
	}
	if strings.ContainsAny(h.host, " \t/\\'\"") {
		return h, fmt.Errorf("bad host name %q", h.host)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return h, fmt.Errorf("bad port %q", port)
		}
		h.port = n
	}
	return h, nil
}

// routeOf returns the ProxyJump or ProxyCommand that applies to a host:
// the berth settings when set (for the target only), else ~/.ssh/config.
// "none" in either means a direct connection. At most one of jump and
// command is returned non-empty.
func routeOf(settingJump, settingCommand string, hs *hostSettings) (jump, command string, err error) {
	settingJump, settingCommand = strings.TrimSpace(settingJump), strings.TrimSpace(settingCommand)
	switch {
	case settingJump != "" && settingCommand != "":
		return "", "", &ConfigError{Msg: fmt.Sprintf("terminal.ssh_proxy_jump (%q) and terminal.ssh_proxy_command (%q) are both set; set one of them (TERMINAL_SSH_PROXY_JUMP / TERMINAL_SSH_PROXY_COMMAND)", settingJump, settingCommand)}
	case settingJump != "":
		jump = settingJump
	case settingCommand != "":
		command = settingCommand
	default:
		jump, command = hs.get("proxyjump"), hs.get("proxycommand")
	}
	if strings.EqualFold(jump, "none") {
		jump = ""
	}
	if strings.EqualFold(command, "none") {
		command = ""
	}
	return jump, command, nil
}

// hopName is how errors name a host on the route: "name:port", the name as
// the user wrote it.
func hopName(t *target) string { return net.JoinHostPort(t.alias, strconv.Itoa(t.port)) }

// routeString describes how t is reached, for logs and doctor: "direct",
// "via jump host a:22 → b:2222" or "via proxy command ...".
func routeString(t *target) string {
	switch {
	case t.proxyCommand != "":
		return fmt.Sprintf("via proxy command %q", t.proxyCommand)
	case t.via != nil:
		var hops []string
		for h := t.via; h != nil; h = h.via {
			name := hopName(h)
			if h.proxyCommand != "" {
				name += fmt.Sprintf(" (itself via proxy command %q)", h.proxyCommand)
			}
			hops = append([]string{name}, hops...)
		}
		return "via jump host " + strings.Join(hops, " → ")
	}
	return "direct"
}
