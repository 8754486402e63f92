package singularity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// envAdmin lists, stops and removes berth's instances and their overlays
// for `berth env`, in the scratch directory the options name.
type envAdmin struct{}

func adminTools(opts backend.Options) (*cli, string, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	scratch, err := scratchDir(getenv, opts.Home)
	if err != nil {
		return nil, "", err
	}
	bin, err := findBinary(strings.TrimSpace(opts.Config.String(keyBinary)))
	if err != nil {
		return nil, "", err
	}
	return &cli{bin: bin}, scratch, nil
}

// List returns every environment with a record in the scratch directory
// (running or stopped) and every running berth_ instance without one.
func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	c, scratch, err := adminTools(opts)
	if err != nil {
		return nil, err
	}
	running, err := c.list(ctx, "berth_*")
	if err != nil {
		return nil, err
	}
	live := map[string]instanceInfo{}
	for _, i := range running {
		live[i.Instance] = i
	}
	var out []backend.EnvInfo
	for _, r := range allRecords(scratch) {
		state := "stopped"
		if _, ok := live[r.Instance]; ok {
			state = "running"
			delete(live, r.Instance)
		}
		out = append(out, backend.EnvInfo{Backend: Name, Key: r.Key, State: state, ID: r.Instance,
			Image: r.Image, Created: r.Created, Persistent: r.Persistent})
	}
	for _, i := range live {
		out = append(out, backend.EnvInfo{Backend: Name, Key: "", State: "running (no berth record)", ID: i.Instance, Image: i.Img})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Remove stops key's instance and removes its overlay and record; a key
// with nothing is not an error.
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	c, scratch, err := adminTools(opts)
	if err != nil {
		return err
	}
	name := InstanceName(key)
	if err := c.stop(ctx, name); err != nil {
		return err
	}
	return removeEnvFiles(scratch, name)
}

// Prune removes the environments not running for longer than maxAge
// (stopped persistent ones included) and returns their keys.
func (envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	c, scratch, err := adminTools(opts)
	if err != nil {
		return nil, err
	}
	running, err := c.list(ctx, "berth_*")
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, i := range running {
		live[i.Instance] = true
	}
	// What crashed checkpoints left, and the checkpoints of forks.
	sweepCheckpoints(checkpointsDir(scratch), maxAge, opts.Log())
	sweepCheckpoints(filepath.Join(scratch, "overlays"), 0, opts.Log())
	var removed []string
	var errs []error
	now := time.Now()
	for _, r := range allRecords(scratch) {
		if live[r.Instance] {
			continue
		}
		since := r.Stopped
		if since.IsZero() {
			if st, err := os.Stat(recordPath(scratch, r.Instance)); err == nil {
				since = st.ModTime()
			}
		}
		if now.Sub(since) < maxAge {
			continue
		}
		if err := removeEnvFiles(scratch, r.Instance); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.Key)
	}
	return removed, errors.Join(errs...)
}
