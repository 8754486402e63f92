package fault

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Trigger says which events of a stream a fault hits: one in every n
// (Every), or each with a probability (Chance). The zero Trigger hits
// nothing.
type Trigger struct {
	every  uint64
	chance float64
}

// Every hits one event in every n of a stream, at a place the seed picks:
// the first hit falls on one of the first n events, then every nth after
// it. Every(1) hits every event; n <= 0 hits none. Unlike a fixed "every
// nth call", different seeds make different calls fail, and one seed the
// same ones.
func Every(n int) Trigger {
	if n <= 0 {
		return Trigger{}
	}
	return Trigger{every: uint64(n)}
}

// Chance hits each event of a stream with probability p (p >= 1: every
// event; p <= 0: none), drawn from the stream's generator.
func Chance(p float64) Trigger {
	if p <= 0 {
		return Trigger{}
	}
	return Trigger{chance: min(p, 1)}
}

// On reports whether the trigger can hit anything.
func (t Trigger) On() bool { return t.every > 0 || t.chance > 0 }

func (t Trigger) String() string {
	switch {
	case t.every == 1, t.chance >= 1:
		return "every event"
	case t.every > 0:
		return "1 in " + strconv.FormatUint(t.every, 10)
	case t.chance > 0:
		return fmt.Sprintf("%g%%", t.chance*100)
	}
	return "never"
}

// hits decides event n (from 1) of a stream whose Every phase is phase.
func (t Trigger) hits(n, phase uint64, r *rand.Rand) bool {
	switch {
	case t.every > 0:
		return (n+phase%t.every)%t.every == 0
	case t.chance >= 1:
		return true
	case t.chance > 0:
		return r.Float64() < t.chance
	}
	return false
}
