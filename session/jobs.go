package session

import (
	"context"
	"strings"
	"time"
)

// HasJobs reports whether the running shell still has background jobs of
// its own (`cmd &` in an earlier command). The idle sweeper asks before it
// cleans an environment up, since that would kill them. With no shell
// running, or when the shell cannot answer within a few seconds, it reports
// false.
func (s *Session) HasJobs(ctx context.Context) bool {
	if s.ShellPID() == "" {
		return false
	}
	var out strings.Builder
	res, err := s.Run(ctx, Request{Command: "jobs -p", Timeout: 5 * time.Second}, &out)
	return err == nil && res.ExitCode == 0 && strings.TrimSpace(out.String()) != ""
}
