package ssh

import (
	"errors"

	"github.com/a55dbaac/berth/config"
)

// The configuration keys only this backend reads (Hermes names).
const (
	keyHost = "ssh_host"
	keyUser = "ssh_user"
	keyPort = "ssh_port"
	keyKey  = "ssh_key"

	keyProxyJump    = "ssh_proxy_jump"
	keyProxyCommand = "ssh_proxy_command"
)

// configKeys are declared through the registration.
var configKeys = []config.Key{
	{Name: keyHost, Default: "", Help: `remote host: a name, an address, user@host or a ~/.ssh/config alias`},
	{Name: keyUser, Default: "", Help: "remote user (else user@ in ssh_host, else User in ~/.ssh/config)"},
	{Name: keyPort, Default: 22, Help: "remote port; 22 yields to a Port in ~/.ssh/config", Check: checkPort},
	{Name: keyKey, Default: "", Help: "private key file (else the agent, IdentityFile and the default keys)"},
	{Name: keyProxyJump, Default: "", Help: `jump hosts, "[user@]host[:port],..." like ssh -J, each resolved through ~/.ssh/config; "none" ignores ProxyJump/ProxyCommand in ~/.ssh/config`},
	{Name: keyProxyCommand, Default: "", Help: `command run with /bin/sh -c whose stdin/stdout carry the connection (%h %p %r %n %%); "none" ignores ProxyJump/ProxyCommand in ~/.ssh/config`},
}

// checkPort accepts a TCP port number.
func checkPort(v any) error {
	if n := v.(int); n < 1 || n > 65535 {
		return errors.New("must be a whole number from 1 to 65535")
	}
	return nil
}
