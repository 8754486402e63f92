package fault

import (
	"fmt"
	"sync"
	"time"
)

// TokenBucket is a rate limit: at most Burst calls at once, refilled at
// Rate tokens a second. A zero Rate is no limit.
type TokenBucket struct {
	Rate  float64
	Burst int
}

// On reports whether the bucket limits anything.
func (tb TokenBucket) On() bool { return tb.Rate > 0 }

func (tb TokenBucket) String() string {
	return fmt.Sprintf("%v/s burst %d", tb.Rate, max(tb.Burst, 1))
}

// Bucket is the state of a TokenBucket: the tokens left and when they were
// counted. Its zero value is a full bucket; it is safe for concurrent use.
// It follows the wall clock, not the seed: which call it refuses depends
// on when calls come.
type Bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// Take takes one token at now from a bucket of the given shape; when none
// is left it takes nothing and says how long until one is.
func (b *Bucket) Take(tb TokenBucket, now time.Time) (wait time.Duration, ok bool) {
	if !tb.On() {
		return 0, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	burst := float64(max(tb.Burst, 1))
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	}
	if now.After(b.last) {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*tb.Rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / tb.Rate * float64(time.Second)), false
}

// Reset fills the bucket again.
func (b *Bucket) Reset() {
	b.mu.Lock()
	b.tokens, b.last = 0, time.Time{}
	b.mu.Unlock()
}
