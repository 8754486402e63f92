package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Jitter is a delay drawn evenly from Min to Max (Max below Min means
// exactly Min); draw it with Stream.Delay. The zero Jitter is no delay.
type Jitter struct {
	Min, Max time.Duration
}

// On reports whether the jitter can be more than zero.
func (j Jitter) On() bool { return j.Min > 0 || j.Max > 0 }

func (j Jitter) String() string {
	if j.Max <= j.Min {
		return j.Min.String()
	}
	return fmt.Sprintf("%v-%v", j.Min, j.Max)
}

func (j Jitter) pick(r *rand.Rand) time.Duration {
	if j.Max <= j.Min {
		return j.Min
	}
	return j.Min + time.Duration(r.Int64N(int64(j.Max-j.Min)+1))
}

// Sleep waits d, or until ctx ends and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
