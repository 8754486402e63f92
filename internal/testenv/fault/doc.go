// Package fault is the vocabulary the realistic fakes (modalfake,
// daytonafake) draw their unkindness from: when a fault hits (Every,
// Chance), how long a delay lasts (Jitter), how fast calls may come
// (TokenBucket), how fast a link carries bytes (Bandwidth). One file per
// primitive, in the spirit of toxiproxy's one file per toxic.
//
// Every random decision is drawn from a Source made from one seed, never
// from the global math/rand: a run that failed is replayed by giving its
// seed back (BERTH_FAKE_SEED, see SourceFromEnv). The fakes log the seed
// with their start line and again when the test fails (Report).
//
// A Source does not hand out one sequence of numbers shared by every
// caller, whose order would depend on how goroutines are scheduled.
// Decisions are drawn from streams (Source.Stream), one per identity: the
// fault, and the stable thing it hits (the third sandbox created, the
// second exec in it, its stdout). A stream's generator is seeded from the
// seed and its identity alone, so its n-th decision is the same in every
// run with that seed, whatever happened on other streams in between.
//
// What the seed cannot replay, and why:
//
//   - the order of events within one stream when several goroutines race
//     on it (two calls for one sandbox in flight at once);
//   - identities that are themselves decided by a race: a fake numbers
//     its sandboxes in the order their creations arrive, so sandboxes
//     created concurrently may swap numbers, and with them their faults;
//   - decisions that depend on time: a token bucket refills with the wall
//     clock, and how output is cut into chunks depends on when it is read;
//   - what a drawn delay does: the delay itself is replayed, the race it
//     causes may fall either way.
//
// A replay is therefore exact for a test that drives the fake from one
// goroutine, and for the calls of each sandbox in a test whose sandboxes
// are created one at a time; for a suite running cases in parallel it
// replays each stream's decisions but not which case meets them.
package fault
