// Package daemon keeps berth's environments warm between `berth exec` and
// `berth shell` calls, the way OpenSSH's ControlPersist keeps one
// connection for later ssh calls: the first call for a berth home starts a
// background berth (Serve) that holds the environments, one
// manager.Manager per environment key, and listens on a unix socket in the
// home; later calls (package wire's Client) send their command there and
// get its output streamed back, so cd, exported variables and the started
// container or ssh connection carry over from one call to the next.
//
// The socket lives in $BERTH_HOME/daemon (mode 0700), is itself mode 0600,
// and every connection's peer is checked with SO_PEERCRED: a process of
// another user is refused even where the file modes would let it in. The
// daemon exits after lifetime_seconds with no environment left (the idle
// sweep cleans environments up as berth mcp does: none is cleaned while a
// command or background process runs in it) and no connection open, or on
// `berth daemon stop` / SIGTERM, closing every environment as a one-process
// berth does at exit.
//
// Each request carries the caller's configuration inputs (environment,
// flags, cwd), from which the daemon loads the configuration as the
// caller would have; a request whose configuration differs from its
// environment's gets a new environment. The protocol is package wire.
package daemon
