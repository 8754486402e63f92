package terminal

// The exit statuses of a command-line run (berth exec, the last status of
// berth shell) besides the command's own, as docker run and the shell use
// them.
const (
	// StatusBlocked: the approval check refused to run the command, the
	// shell's "cannot execute". A blocked result's ExitCode is this too.
	StatusBlocked = 126
	// StatusMoved: the command was still running at its timeout and was
	// moved to the background: the timeout's status, though it goes on.
	StatusMoved = 124
	// StatusError: berth itself failed (bad flags, unreachable backend),
	// distinct from any status a command returns; docker run uses it too.
	StatusError = 125
)

// ExitStatus is the exit status of a command-line run for r, and what it
// prints on stderr (after "berth: ", unless it prints r as JSON) when the
// command did not run or berth failed: StatusBlocked with the approval's
// message, StatusMoved, StatusError with the error, StatusError for a
// status no process can exit with, else the command's own status.
func (r Result) ExitStatus() (int, string) {
	switch {
	case !r.Approval.Allowed():
		return StatusBlocked, r.Approval.Message
	case r.MovedToBackground:
		return StatusMoved, ""
	case r.Error != nil:
		return StatusError, *r.Error
	case r.ExitCode < 0 || r.ExitCode > 255:
		return StatusError, ""
	}
	return r.ExitCode, ""
}
