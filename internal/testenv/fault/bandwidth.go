package fault

import "time"

// bandwidthBurst is how far ahead of its rate a link may send.
const bandwidthBurst = 50 * time.Millisecond

// Bandwidth is a link that carries at most BytesPerSec bytes a second (0:
// no limit), sending up to 50 ms worth ahead of its rate. It is for one
// writer: Pace is not safe for concurrent use.
type Bandwidth struct {
	BytesPerSec int
	free        time.Time // when the link has carried everything so far
}

// Pace waits until the link has carried n more bytes.
func (l *Bandwidth) Pace(n int) {
	if l.BytesPerSec <= 0 {
		return
	}
	now := time.Now()
	if l.free.Before(now.Add(-bandwidthBurst)) {
		l.free = now.Add(-bandwidthBurst)
	}
	l.free = l.free.Add(time.Duration(n) * time.Second / time.Duration(l.BytesPerSec))
	if d := l.free.Sub(now); d > 0 {
		time.Sleep(d)
	}
}
