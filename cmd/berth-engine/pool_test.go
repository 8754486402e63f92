package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// terminal.warm_pool end to end through the daemon, on docker: the first
// task's environment is made cold and starts the pool; once it has one
// ready, berth daemon status and berth env ls show it; the next task's
// environment is that container, claimed (its key listed on it, the pool
// refilling); stopping the daemon removes what the pool holds. On a
// backend that keeps no pools the caller is told so.
func TestWarmPoolThroughTheDaemon(t *testing.T) {
	dockerenv.Require(t)
	d := newDaemonEnv(t, "TERMINAL_DOCKER_IMAGE="+dockerenv.Image(t), "TERMINAL_WARM_POOL=1", "BERTH_APPROVALS_MODE=off",
		"TERMINAL_CONTAINER_PERSISTENT=false")
	d.mustRun(t, 0, "exec", "--backend", "docker", "--task", "first", "--", "true")

	// poolLine waits for the daemon's status to show its pool with want.
	poolLine := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute) // a hang guard: a container to start on a loaded machine
		for {
			out := d.mustRun(t, 0, "daemon", "status")
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "warm pool ") && strings.Contains(l, want) {
					return l
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("berth daemon status never showed a warm pool with %q:\n%s", want, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	poolLine("1 of 1 ready")
	id := members(t, d)[0]
	ls := d.mustRun(t, 0, "env", "ls")
	if !regexp.MustCompile(`(?m)^docker\s+\(pool [0-9a-f]{12}\)\s+running\s+\S+\s+` + id[:12] + `\S*\s`).MatchString(ls) {
		t.Fatalf("berth env ls does not show the pool's container %s as one of a pool:\n%s", id[:12], ls)
	}

	d.mustRun(t, 0, "exec", "--backend", "docker", "--task", "second", "--", "true")
	ls = d.mustRun(t, 0, "env", "ls")
	if !regexp.MustCompile(`(?m)^docker\s+second\s+running\s+\S+\s+` + id[:12] + `\S*\s`).MatchString(ls) {
		t.Errorf("task second's environment is not the pooled container %s, listed under its key:\n%s", id[:12], ls)
	}
	poolLine("1 claimed")
	poolLine("1 of 1 ready") // refilled
	refill := members(t, d)[0]
	if refill == id {
		t.Fatalf("the pool still holds %s after task second claimed it", id[:12])
	}

	if _, errs, code := d.run(t, "", "exec", "--backend", "local", "--task", "here", "--", "true"); code != 0 || !strings.Contains(errs, "local backend keeps no warm pools (backends that do: docker") {
		t.Errorf("warm_pool on local: exit %d, stderr %q; want a note that local keeps no pools, naming docker", code, errs)
	}

	d.mustRun(t, 0, "daemon", "stop")
	ls = d.mustRun(t, 0, "env", "ls")
	for _, gone := range []string{id, refill} {
		if strings.Contains(ls, gone[:12]) {
			t.Errorf("after berth daemon stop, berth env ls still shows %s (the claimed container, and the pool's refill):\n%s", gone[:12], ls)
		}
	}
}

// members are the IDs of the ready environments of the daemon's one pool
// (berth daemon status --json).
func members(t *testing.T, d *daemonEnv) []string {
	t.Helper()
	st := d.status(t)
	pools, _ := st["pools"].([]any)
	if len(pools) != 1 {
		t.Fatalf("daemon status: pools %v, want one", st["pools"])
	}
	var ids []string
	for _, m := range pools[0].(map[string]any)["members"].([]any) {
		if id, _ := m.(string); len(id) >= 12 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("daemon status: the pool lists no members: %v", pools[0])
	}
	return ids
}
