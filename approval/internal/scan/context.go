package scan

// Context is where a command or write would happen.
type Context struct {
	// Backend is the backend's name (local, ssh, docker, ...), for messages.
	Backend string
	// Sandboxed is true when the environment cannot damage any machine
	// that matters: the backend reports that its commands run in an image
	// of their own with nothing of the host mounted (backend.IsolationImage:
	// a container or sandbox without host binds). Then the floor does not
	// apply and nothing is asked; approvals.deny still holds.
	Sandboxed bool
	// Writable, when not nil, lists every directory tree the kernel lets
	// the environment's commands write (workspace confinement): a write or
	// removal anywhere else fails however the command is spelled.
	Writable []string
	// Protected, under workspace confinement, lists paths inside the
	// writable trees that the kernel keeps read-only all the same (berth's
	// home and configuration, a repository's .git/hooks and .git/config):
	// a write to one, or under one, fails however it is spelled.
	Protected []string
	// SignalsConfined is true when the kernel stops the environment's
	// commands from signalling processes outside it.
	SignalsConfined bool
	// Cwd is the shell's working directory (absolute, or ~), for relative
	// paths; "" if unknown.
	Cwd string
	// Home is the home directory inside the environment ($HOME there), ""
	// if unknown: ~, $HOME and this path are the home either way.
	Home string
	// BerthHome and ConfigPath are berth's home directory and config file,
	// whose writes need approval. Set them only when the environment shares
	// the host's file system (the local backend).
	BerthHome  string
	ConfigPath string
	// Resolve, when set, returns the path a (cleaned, absolute) path names
	// once symbolic links are followed: the longest prefix that exists is
	// resolved and the rest appended. Set it only when the environment's
	// files are this machine's (NativeResolve): writes and recursive
	// removals are then checked by where they land as well as by how they
	// are spelled, so a link to berth's home or to the home directory does
	// not hide them.
	Resolve func(path string) string
	// Prelude is shell text that ran before in the same shell (the earlier
	// lines of input sent to a background shell): the command is checked
	// with the variables, functions, aliases, cd and positional parameters
	// it left, and its own findings are not reported again.
	Prelude string
	// Names are the functions and aliases the session's shell already
	// defines (from earlier calls): a command calling one whose
	// definition berth does not have (Definitions) runs what berth cannot
	// see, so it is dynamic.
	Names []string
	// Definitions is shell text that defines functions and aliases the
	// session's shell holds from earlier calls (declare -f and alias -p,
	// as the shell printed them): a call of one is checked by what its
	// definition runs, with its arguments. Names it does not define stay
	// dynamic.
	Definitions string
	// IFS is the value of IFS in the session's shell before the command,
	// as the shell reported it (nil when berth does not know it: an
	// earlier call may have set it). An unquoted expansion in command
	// position is split at it; when it is unknown, a value that is not a
	// plain name splits where berth cannot tell, and the command is
	// dynamic.
	IFS *string
	// BerthPIDs are the process ids of berth's own processes that the
	// environment's commands can signal (berth itself, the shell's parent
	// when that is berth's), and PPID is $PPID in the environment's shell;
	// both only when the environment shares this machine's processes.
	// Signalling them (kill -9 $PPID, pkill berth) ends berth and every
	// task's environment: kill-berth.
	BerthPIDs []string
	PPID      string
}
