package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/session"
)

// CheckpointInfo describes a named checkpoint berth keeps: what
// `berth env checkpoints` lists, and what Checkpoint returns.
type CheckpointInfo struct {
	Backend string    `json:"backend"`
	Key     string    `json:"key"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Size is what the checkpoint takes, in bytes, as its backend reports
	// it (0: unknown); the bound checkpoints.max_total_mb adds it up.
	Size int64 `json:"size,omitempty"`
	// ID is the backend's reference to what it keeps (an image, a
	// directory, a snapshot).
	ID string `json:"id"`
	// Replaced says a checkpoint of the same name was replaced by this
	// one (Checkpoint's answer only).
	Replaced bool `json:"replaced,omitempty"`
	Carried
}

// record is a checkpoint as stored in berth's home: its description, the
// backend's reference, and the shell state (which may hold the values of
// variables the commands exported: the file is mode 0600 in directories
// of mode 0700, and only the description is ever shown).
type record struct {
	Version    int                `json:"version"`
	Info       CheckpointInfo     `json:"info"`
	Checkpoint backend.Checkpoint `json:"checkpoint"`
	State      session.State      `json:"state"`
}

const recordVersion = 1

// checkpointDir is where the records of berth's checkpoints live in its
// home: <home>/checkpoints/<backend>/<key>/<name>.json.
const checkpointDir = "checkpoints"

// namePattern is what a checkpoint's name and an environment key with
// checkpoints may hold: they name files in berth's home.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Bounds on names.
const (
	maxNameLen = 64
	maxKeyLen  = 128
)

// CheckName returns an error naming name and what a checkpoint's name may
// hold when it is not one: 1 to 64 letters, digits, '.', '-' and '_',
// starting with a letter or a digit (it names a file in berth's home, so
// no slash).
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("checkpoint name is empty: give one, e.g. before-refactor")
	case strings.Contains(name, "/"):
		return fmt.Errorf("checkpoint name %q has a slash: use letters, digits, '.', '-' and '_' (e.g. %s)", name, strings.ReplaceAll(name, "/", "-"))
	case len(name) > maxNameLen || !namePattern.MatchString(name):
		return fmt.Errorf("checkpoint name %q: use 1 to %d letters, digits, '.', '-' and '_', starting with a letter or a digit", name, maxNameLen)
	}
	return nil
}

// checkKey refuses an environment key that cannot name a directory of
// checkpoints.
func checkKey(key string) error {
	if len(key) > maxKeyLen || !namePattern.MatchString(key) {
		return fmt.Errorf("environment key %q cannot have checkpoints: its checkpoints are files named after it in berth's home, so it must be 1 to %d letters, digits, '.', '-' and '_', starting with a letter or a digit", key, maxKeyLen)
	}
	return nil
}

// store is the records of one berth home.
type store struct{ home string }

func (s store) dir(backendName, key string) string {
	return filepath.Join(s.home, checkpointDir, backendName, key)
}

func (s store) path(backendName, key, name string) string {
	return filepath.Join(s.dir(backendName, key), name+".json")
}

// lock takes the lock of key's checkpoints (a flock, so that two berth
// processes sharing the home, a daemon and a berth mcp, do not both pass
// a bound), waiting until ctx ends.
func (s store) lock(ctx context.Context, backendName, key string) (func(), error) {
	dir := s.dir(backendName, key)
	if err := privateDirs(filepath.Join(s.home, checkpointDir), dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("checkpoints: lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("checkpoints of %q: waiting for another berth's checkpoint of it: %w", key, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// privateDirs makes each directory (parents first) with mode 0700.
func privateDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
	}
	return nil
}

// write stores r atomically: a new file, synced, renamed over the old.
func (s store) write(r record) error {
	dir := s.dir(r.Info.Backend, r.Info.Key)
	if err := privateDirs(filepath.Join(s.home, checkpointDir), filepath.Join(s.home, checkpointDir, r.Info.Backend), dir); err != nil {
		return err
	}
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoints: encode %s: %w", r.Info.Name, err)
	}
	f, err := os.CreateTemp(dir, "."+r.Info.Name+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path(r.Info.Backend, r.Info.Key, r.Info.Name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoints: write %s of %q: %w", r.Info.Name, r.Info.Key, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// errNoRecord is wrapped by load's error when the checkpoint does not
// exist.
var errNoRecord = errors.New("no such checkpoint")

// load reads one record.
func (s store) load(backendName, key, name string) (record, error) {
	var r record
	b, err := os.ReadFile(s.path(backendName, key, name))
	if errors.Is(err, fs.ErrNotExist) {
		return r, errNoRecord
	}
	if err != nil {
		return r, fmt.Errorf("checkpoints: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("checkpoints: %s is damaged: %w", s.path(backendName, key, name), err)
	}
	if r.Version != recordVersion {
		return r, fmt.Errorf("checkpoints: %s is of version %d, this berth reads %d", s.path(backendName, key, name), r.Version, recordVersion)
	}
	return r, nil
}

// remove deletes one record; a record already gone is not an error.
func (s store) remove(backendName, key, name string) error {
	if err := os.Remove(s.path(backendName, key, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoints: %w", err)
	}
	return nil
}

// list returns the records of backendName ("": every backend) and key
// ("": every key), oldest first. Damaged records are skipped (and
// reported in the error, after the rest).
func (s store) list(backendName, key string) ([]record, error) {
	root := filepath.Join(s.home, checkpointDir)
	backends := []string{backendName}
	if backendName == "" {
		backends = subdirs(root)
	}
	var out []record
	var errs []error
	for _, b := range backends {
		keys := []string{key}
		if key == "" {
			keys = subdirs(filepath.Join(root, b))
		}
		for _, k := range keys {
			names, _ := filepath.Glob(filepath.Join(s.dir(b, k), "*.json"))
			for _, n := range names {
				r, err := s.load(b, k, strings.TrimSuffix(filepath.Base(n), ".json"))
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, r)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Info, out[j].Info
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		return a.Created.Before(b.Created)
	})
	return out, errors.Join(errs...)
}

// subdirs lists the directories in dir whose names could be a backend's
// or a key's.
func subdirs(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && namePattern.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// ListCheckpoints returns the named checkpoints kept in the berth home
// home, oldest first within a key: those of backendName ("" for every
// backend) and key ("" for every key). It reads berth's records only; no
// backend is asked. A damaged record is left out and named in the error,
// after the others are returned.
func ListCheckpoints(home, backendName, key string) ([]CheckpointInfo, error) {
	recs, err := store{home}.list(backendName, key)
	out := make([]CheckpointInfo, len(recs))
	for i, r := range recs {
		out[i] = r.Info
	}
	return out, err
}
