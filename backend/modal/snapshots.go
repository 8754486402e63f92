package modal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SnapshotsFile is where the image ids of persistent environments'
// filesystem snapshots are recorded, in the berth home, in the reference's
// format: {"direct:<key>": "<image id>"}.
const SnapshotsFile = "modal_snapshots.json"

// snapshotTimesFile records when each snapshot was taken (berth env prune
// needs an age; the reference's file has none).
const snapshotTimesFile = "modal_snapshots.times.json"

// snapshots is the record of persistent environments' snapshots. Reads and
// writes hold an exclusive lock on a lock file beside it, so berth
// processes sharing a home do not lose each other's entries.
type snapshots struct {
	dir string
}

func recordKey(key string) string { return "direct:" + key }

// lock takes the store's lock and returns its release.
func (s snapshots) lock() (func(), error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("modal: create %s: %w", s.dir, err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, SnapshotsFile+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("modal: open snapshot lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("modal: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func readJSON[T any](path string) (map[string]T, error) {
	m := map[string]T{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modal: read %s: %w", path, err)
	}
	if len(data) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("modal: %s is not a JSON object of strings (fix or remove it): %w", path, err)
	}
	return m, nil
}

func writeJSON[T any](path string, m map[string]T) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("modal: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("modal: replace %s: %w", path, err)
	}
	return nil
}

// all returns every record, with the time it was taken when known.
func (s snapshots) all() (map[string]string, map[string]time.Time, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	ids, err := readJSON[string](filepath.Join(s.dir, SnapshotsFile))
	if err != nil {
		return nil, nil, err
	}
	times, err := readJSON[time.Time](filepath.Join(s.dir, snapshotTimesFile))
	if err != nil {
		times = map[string]time.Time{}
	}
	return ids, times, nil
}

// get returns key's snapshot image id, "" if none.
func (s snapshots) get(key string) (string, error) {
	ids, _, err := s.all()
	if err != nil {
		return "", err
	}
	return ids[recordKey(key)], nil
}

// set records image as key's snapshot and returns the id it replaced.
func (s snapshots) set(key, image string) (old string, err error) {
	return s.update(key, func(string) (string, bool) { return image, true })
}

// drop removes key's record if it still names image (another berth may have
// recorded a newer snapshot meanwhile).
func (s snapshots) drop(key, image string) error {
	_, err := s.update(key, func(old string) (string, bool) { return "", old == image })
	return err
}

// update replaces key's record by what fn returns for the current one ("" =
// no record), when fn says so, and returns the record it found.
func (s snapshots) update(key string, fn func(old string) (string, bool)) (old string, err error) {
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	path := filepath.Join(s.dir, SnapshotsFile)
	ids, err := readJSON[string](path)
	if err != nil {
		return "", err
	}
	tpath := filepath.Join(s.dir, snapshotTimesFile)
	times, terr := readJSON[time.Time](tpath)
	if terr != nil {
		times = map[string]time.Time{}
	}
	k := recordKey(key)
	old = ids[k]
	image, ok := fn(old)
	if !ok {
		return old, nil
	}
	if image == "" {
		delete(ids, k)
		delete(times, k)
	} else {
		ids[k] = image
		times[k] = time.Now().UTC()
	}
	if err := writeJSON(path, ids); err != nil {
		return old, err
	}
	if err := writeJSON(tpath, times); err != nil {
		return old, err
	}
	return old, nil
}
