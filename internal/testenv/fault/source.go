package fault

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// maxLogged bounds the decisions a Source keeps (Decisions); later ones are
// counted, not kept, so that a fake serving for hours does not grow.
const maxLogged = 1 << 17

// Source hands out the decision streams of one seed. Its methods are safe
// for concurrent use.
type Source struct {
	seed    uint64
	fromEnv bool

	mu      sync.Mutex
	streams map[string]*Stream
	log     []Decision
	dropped int
}

// NewSource returns a Source whose decisions all follow from seed.
func NewSource(seed uint64) *Source {
	return &Source{seed: seed, streams: map[string]*Stream{}}
}

// Seed is the seed the Source's decisions follow from.
func (s *Source) Seed() uint64 { return s.seed }

// String describes the seed for a log line, with how to replay it.
func (s *Source) String() string {
	from := ""
	if s.fromEnv {
		from = " from " + SeedEnv
	}
	return fmt.Sprintf("fault seed %d%s (replay with %s=%d)", s.seed, from, SeedEnv, s.seed)
}

// Stream returns the stream of identity: the same Stream for every call
// with the same identity, its generator seeded from the Source's seed and
// identity alone. An identity names one fault at one place, e.g.
// "transient sandbox 3 TaskExecStdioRead": a stream serves one fault, so
// that what one fault draws never shifts another's decisions.
func (s *Source) Stream(identity string) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[identity]; ok {
		return st
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.seed)
	key := sha256.Sum256(append(b[:], identity...))
	r := rand.New(rand.NewChaCha8(key))
	st := &Stream{src: s, id: identity, r: r, phase: r.Uint64()}
	s.streams[identity] = st
	return st
}

// Decision is one decision a stream made: a fault that hit an event, a
// delay drawn for one, or a choice among alternatives. Events where no
// fault hit are not recorded.
type Decision struct {
	Stream string        // the stream's identity
	Event  uint64        // the event's number on the stream, from 1
	Hit    bool          // a trigger hit the event
	Delay  time.Duration // the delay drawn for the event
	Choice int           // the alternative chosen (Stream.Choose), from 0
	what   kind
}

type kind uint8

const (
	kindHit kind = iota + 1
	kindDelay
	kindChoice
)

func (d Decision) String() string {
	switch d.what {
	case kindHit:
		return fmt.Sprintf("%s #%d: hit", d.Stream, d.Event)
	case kindDelay:
		return fmt.Sprintf("%s #%d: delay %v", d.Stream, d.Event, d.Delay)
	case kindChoice:
		return fmt.Sprintf("%s #%d: choice %d", d.Stream, d.Event, d.Choice)
	}
	return fmt.Sprintf("%s #%d", d.Stream, d.Event)
}

// Decisions returns the decisions made so far, ordered by stream and then
// by event, so that two Sources of one seed that saw the same events on
// each stream return equal lists, however the streams interleaved. It
// keeps the first 131072 decisions; Dropped counts the rest.
func (s *Source) Decisions() []Decision {
	s.mu.Lock()
	out := slices.Clone(s.log)
	s.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Decision) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Event, b.Event))
	})
	return out
}

// Dropped is how many decisions were made past the ones Decisions keeps.
func (s *Source) Dropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Drawn reports whether any stream was asked for a decision: when none
// was, the seed played no part in the run.
func (s *Source) Drawn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams) > 0
}

func (s *Source) record(d Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) < maxLogged {
		s.log = append(s.log, d)
	} else {
		s.dropped++
	}
}

// Stream is one sequence of decisions: the events one fault meets at one
// place, in order. Its methods are safe for concurrent use, but events
// that race on one stream take their numbers in the order they win.
type Stream struct {
	src   *Source
	id    string
	phase uint64 // where Every's hits fall, drawn first

	mu sync.Mutex
	r  *rand.Rand
	n  uint64 // events so far
}

// Identity is the stream's identity.
func (st *Stream) Identity() string { return st.id }

// Hit counts one event on the stream and reports whether t hits it.
func (st *Stream) Hit(t Trigger) bool {
	st.mu.Lock()
	st.n++
	n, hit := st.n, t.hits(st.n, st.phase, st.r)
	st.mu.Unlock()
	if hit {
		st.src.record(Decision{Stream: st.id, Event: n, Hit: true, what: kindHit})
	}
	return hit
}

// Delay counts one event on the stream and draws its delay from j.
func (st *Stream) Delay(j Jitter) time.Duration {
	st.mu.Lock()
	st.n++
	n, d := st.n, j.pick(st.r)
	st.mu.Unlock()
	st.src.record(Decision{Stream: st.id, Event: n, Delay: d, what: kindDelay})
	return d
}

// Choose counts one event on the stream and chooses one of n alternatives
// for it, from 0 to n-1 (0 when n < 2).
func (st *Stream) Choose(n int) int {
	st.mu.Lock()
	st.n++
	ev, c := st.n, 0
	if n > 1 {
		c = st.r.IntN(n)
	}
	st.mu.Unlock()
	st.src.record(Decision{Stream: st.id, Event: ev, Choice: c, what: kindChoice})
	return c
}
