package singularity

import "github.com/a55dbaac/berth/internal/procmark"

// Owner marks name the berth process that started an instance:
// "<boot id>/<pid>/<process start time in clock ticks>/<PID namespace>", so
// a later berth on the same machine can tell whether that process still
// runs even after its pid was reused, and leaves alone what a berth of
// another PID namespace owns (see internal/procmark; the docker backend
// marks its containers the same way).
//
// currentOwner returns this process's owner mark ("" when /proc cannot
// tell). Tests replace it to leave instances owned by a dead process.
var currentOwner = procmark.Self
