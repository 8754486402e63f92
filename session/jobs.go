package session

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// HasJobs reports whether the running shell still has background jobs of
// its own (`cmd &` in an earlier command) that still run. The idle sweeper
// asks before it cleans an environment up, since that would kill them.
// With no shell running, or when the shell cannot answer within a few
// seconds, it reports false.
func (s *Session) HasJobs(ctx context.Context) bool {
	if s.ShellPID() == "" {
		return false
	}
	ask := func(cmd string) []string {
		var out strings.Builder
		res, err := s.Run(ctx, Request{Command: cmd, Timeout: 5 * time.Second}, &out)
		if err != nil || res.ExitCode != 0 {
			return nil
		}
		var pids []string
		for _, f := range strings.Fields(out.String()) {
			if _, err := strconv.Atoi(f); err == nil {
				pids = append(pids, f)
			}
		}
		return pids
	}
	// bash and dash keep a finished job in their table (and in jobs -p)
	// until they have reported it Done, which a non-interactive shell only
	// does when asked; dash has no jobs -r and no job table in $(...). So
	// the pids are listed first, then those whose process still runs.
	pids := ask("jobs -p")
	if len(pids) == 0 {
		return false
	}
	return len(ask(`for __berth_j in `+strings.Join(pids, " ")+`; do command kill -0 "$__berth_j" 2>/dev/null && command echo "$__berth_j"; done; unset __berth_j; true`)) > 0
}
