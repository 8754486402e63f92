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
// and is named after the daemon's build (wire.Identity): a berth of
// another build starts a daemon of its own. Every connection's peer is
// checked before anything is read from it (peer.go): a process of another
// user is refused, and so is one in other namespaces or under another
// seccomp state than the daemon's — a sandboxed caller, whose command
// would otherwise run outside its sandbox; it runs in one process instead.
// The daemon is not dumpable (hostproc.Harden), whatever it serves. It
// exits after lifetime_seconds with no environment left (the idle sweep
// cleans environments up as berth mcp does: none is cleaned while a
// command or background process runs in it) and no connection open, or on
// `berth daemon stop` / SIGTERM, closing every environment as a
// one-process berth does at exit.
//
// Each request carries the caller's configuration inputs (flags, cwd, and
// the variables configuration loading reads), from which the daemon loads
// the configuration as the caller would have (slots.go); it asks the
// caller for any other variable it reads while the call runs. A request
// whose configuration differs from its environment's gets a new
// environment, except in keys declared per call (config.PerCall): the
// approval settings among them are re-read into the environment's gate on
// every request. The protocol is package wire.
//
// The files: server.go, the daemon's life (Serve, accept, idle exit,
// shutdown, status); peer.go, who it serves; slots.go, configurations and
// the environments made from them; run.go, the operations; tap.go, the
// stream of a command's output.
package daemon
