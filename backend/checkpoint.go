package backend

import (
	"context"
	"time"
)

// Checkpoint is a copy of an environment's files at one moment, kept by its
// backend beyond the environment's own life: a committed image and copied
// volumes (docker), a copied workspace tree (local in workspace mode, ssh),
// a copied overlay (singularity), a provider's filesystem snapshot (modal,
// daytona), a cloned or copied volume claim (kubernetes). A new
// environment made from it (Options.From) starts with those files; the
// environment it was taken from keeps running, unchanged.
//
// A checkpoint holds files only. The shell's state (working directory,
// exported variables, functions, aliases, options) is the session's, and
// berth carries it above this package; background processes are never
// carried.
type Checkpoint struct {
	// Backend is the registered name of the backend that made it.
	Backend string `json:"backend"`
	// Key is the environment key it was taken from; Name the name it was
	// given (berth env checkpoint KEY NAME), "" for the transient
	// checkpoint of a fork.
	Key  string `json:"key"`
	Name string `json:"name,omitempty"`
	// ID is the backend's own reference to what it keeps: an image id, a
	// directory, a snapshot id, a claim's name.
	ID string `json:"id"`
	// Size is what the checkpoint takes, in bytes, as far as the backend
	// can tell (0: unknown). Bounds on the checkpoints kept add it up.
	Size int64 `json:"size,omitempty"`
	// Created is when it was taken.
	Created time.Time `json:"created"`
	// Meta carries what else the backend needs to restore or remove it
	// (volume names, the path the copied tree had, ...). Never a secret:
	// it is stored in berth's home and shown by berth env checkpoints
	// --json.
	Meta map[string]string `json:"meta,omitempty"`
}

// Checkpointer is implemented by backends whose environments' files can
// be checkpointed, and so forked and restored. Checkpoint copies the files
// as they are now, by the backend's native means, without stopping the
// environment; berth calls it only when no command of the session runs.
// The name is for the backend's own labels; berth keeps the record.
// Capabilities.Checkpoint says how; a backend that cannot checkpoint this
// particular environment (an unconfined local one: its files are the
// whole machine) returns an error saying why, as Capabilities.NoCheckpoint
// does.
type Checkpointer interface {
	Checkpoint(ctx context.Context, name string) (Checkpoint, error)
}

// Relocator is implemented by a backend made from a checkpoint whose files
// live at another path than in the environment they were copied from (the
// copied workspace tree of a local or ssh environment). Relocate maps a
// path of the source environment to the same file in this one, and
// returns any other path unchanged; berth maps the restored working
// directory through it.
type Relocator interface {
	Relocate(path string) string
}

// CheckpointAdmin removes checkpoints a backend keeps, whether or not the
// environment they were taken from still exists (Registration.Checkpoints).
type CheckpointAdmin interface {
	// Remove deletes what the backend keeps for cp; a checkpoint already
	// gone is not an error. What a live environment made from it still
	// uses (an image under a running container) may stay until that
	// environment goes, but cp can no longer be restored.
	Remove(ctx context.Context, opts Options, cp Checkpoint) error
}
