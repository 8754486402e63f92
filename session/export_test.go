package session

import "context"

// KillForTest runs the kill script against pid with an expected start time.
func KillForTest(s *Session, ctx context.Context, pid int, start string) error {
	return s.kill(ctx, pid, start, "")
}
