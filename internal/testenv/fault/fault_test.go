package fault

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// requests is one fixed sequence of events on a few streams, as a fake
// meets them: transient failures by chance, a rate limit every 5th call,
// delays and a choice of answer.
func requests(src *Source) {
	for i := range 60 {
		sb := fmt.Sprintf("sandbox %d", i%3+1)
		if src.Stream("transient " + sb).Hit(Chance(0.3)) {
			src.Stream("status " + sb).Choose(2)
		}
		src.Stream("limit " + sb).Hit(Every(5))
		src.Stream("delay " + sb).Delay(Jitter{Min: time.Millisecond, Max: time.Second})
	}
}

// One seed gives one fault sequence for one sequence of requests; another
// seed gives another.
func TestOneSeedOneSequence(t *testing.T) {
	a, b, other := NewSource(12345), NewSource(12345), NewSource(12346)
	requests(a)
	requests(b)
	requests(other)
	da, db, dother := a.Decisions(), b.Decisions(), other.Decisions()
	if len(da) == 0 {
		t.Fatal("the requests drew no decision: the test tests nothing")
	}
	if !slices.Equal(da, db) {
		t.Fatalf("two sources of seed 12345 decided differently:\n%v\n%v", da, db)
	}
	if slices.Equal(da, dother) {
		t.Fatal("seeds 12345 and 12346 made the same decisions: the seed plays no part")
	}
	hits := 0
	for _, d := range da {
		if d.Hit && strings.HasPrefix(d.Stream, "transient") {
			hits++
		}
	}
	if hits == 0 || hits == 60 {
		t.Fatalf("%d of 60 events hit by a 30%% chance", hits)
	}
}

// A stream's decisions depend on the seed, its identity and its own
// events only: the order in which streams are drawn from, one goroutine
// per stream included, changes nothing.
func TestStreamsIndependentOfInterleaving(t *testing.T) {
	ids := []string{"transient sandbox 1", "transient sandbox 2", "transient sandbox 3"}
	draw := func(st *Stream) {
		st.Hit(Chance(0.5))
		st.Delay(Jitter{Max: time.Second})
	}
	inOrder := NewSource(7)
	for _, id := range ids {
		for range 50 {
			draw(inOrder.Stream(id))
		}
	}
	interleaved := NewSource(7)
	for range 50 {
		for _, id := range slices.Backward(ids) {
			draw(interleaved.Stream(id))
		}
	}
	concurrent := NewSource(7)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for range 50 {
				draw(concurrent.Stream(id))
			}
		})
	}
	wg.Wait()
	want := inOrder.Decisions()
	for name, got := range map[string][]Decision{"interleaved": interleaved.Decisions(), "concurrent": concurrent.Decisions()} {
		if !slices.Equal(got, want) {
			t.Errorf("%s draws decided differently from draws in order", name)
		}
	}
}

// Every(n) hits one event in each n, the first within the first n; where
// depends on the seed.
func TestEvery(t *testing.T) {
	firsts := map[int]bool{}
	for seed := range uint64(20) {
		for _, n := range []int{1, 2, 5, 13} {
			st := NewSource(seed).Stream(fmt.Sprintf("every %d", n))
			var hits []int
			for i := 1; i <= 4*n; i++ {
				if st.Hit(Every(n)) {
					hits = append(hits, i)
				}
			}
			if len(hits) != 4 || hits[0] > n {
				t.Fatalf("seed %d: Every(%d) hit events %v of %d; want 4 hits, the first within %d", seed, n, hits, 4*n, n)
			}
			for i := 1; i < len(hits); i++ {
				if hits[i]-hits[i-1] != n {
					t.Fatalf("seed %d: Every(%d) hit events %v: not %d apart", seed, n, hits, n)
				}
			}
			if n == 5 {
				firsts[hits[0]] = true
			}
		}
	}
	if len(firsts) < 2 {
		t.Fatalf("Every(5) hit first at %v over 20 seeds: the seed does not move it", firsts)
	}
	st := NewSource(1).Stream("never")
	for range 100 {
		if st.Hit(Every(0)) || st.Hit(Trigger{}) || st.Hit(Chance(0)) {
			t.Fatal("a trigger that is off hit")
		}
	}
}

func TestChance(t *testing.T) {
	st := NewSource(3).Stream("chance")
	hits := 0
	for range 4000 {
		if st.Hit(Chance(0.25)) {
			hits++
		}
	}
	// Seeded, so this count is the same every run: a check that Chance
	// follows its probability, not a statistical test that could flake.
	if hits < 800 || hits > 1200 {
		t.Fatalf("Chance(0.25) hit %d of 4000 events", hits)
	}
	for range 100 {
		if !st.Hit(Chance(1)) || !st.Hit(Chance(7)) {
			t.Fatal("Chance(1) missed")
		}
	}
}

func TestJitter(t *testing.T) {
	st := NewSource(5).Stream("jitter")
	seen := map[time.Duration]bool{}
	for range 200 {
		d := st.Delay(Jitter{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond})
		if d < 10*time.Millisecond || d > 20*time.Millisecond {
			t.Fatalf("a delay of %v out of 10ms-20ms", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays in 200 draws", len(seen))
	}
	if d := st.Delay(Jitter{Min: time.Second, Max: time.Millisecond}); d != time.Second {
		t.Fatalf("Max below Min: %v, want Min", d)
	}
	if (Jitter{}).On() || !(Jitter{Max: 1}).On() {
		t.Fatal("On")
	}
}

func TestTokenBucket(t *testing.T) {
	var b Bucket
	tb := TokenBucket{Rate: 2, Burst: 3}
	now := time.Unix(1000, 0)
	for i := range 3 {
		if _, ok := b.Take(tb, now); !ok {
			t.Fatalf("call %d within the burst refused", i+1)
		}
	}
	wait, ok := b.Take(tb, now)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst: ok %v, wait %v; want refused, 500ms until the next token", ok, wait)
	}
	if _, ok := b.Take(tb, now.Add(500*time.Millisecond)); !ok {
		t.Fatal("refused once a token was back")
	}
	b.Reset()
	if _, ok := b.Take(tb, now); !ok {
		t.Fatal("refused after Reset")
	}
	if _, ok := b.Take(TokenBucket{}, now); !ok {
		t.Fatal("a bucket without a rate refused")
	}
}

func TestSourceFromEnv(t *testing.T) {
	t.Setenv(SeedEnv, "987654")
	src, err := SourceFromEnv()
	if err != nil || src.Seed() != 987654 || !strings.Contains(src.String(), "fault seed 987654 from BERTH_FAKE_SEED (replay with BERTH_FAKE_SEED=987654)") {
		t.Fatalf("from the environment: %v, %v", src, err)
	}
	t.Setenv(SeedEnv, "twelve")
	if _, err := SourceFromEnv(); err == nil || !strings.Contains(err.Error(), `BERTH_FAKE_SEED="twelve"`) {
		t.Fatalf("a seed that is no number: %v", err)
	}
	t.Setenv(SeedEnv, "")
	seeds := map[uint64]bool{}
	for range 5 {
		src, err := SourceFromEnv()
		if err != nil || src.Seed() == 0 || strings.Contains(src.String(), "from") {
			t.Fatalf("without the variable: %v, %v", src, err)
		}
		seeds[src.Seed()] = true
	}
	if len(seeds) < 2 {
		t.Fatalf("five random seeds: %v", seeds)
	}
}

// recorder is a TB whose failure the test decides.
type recorder struct {
	failed   bool
	cleanups []func()
	lines    []string
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Failed() bool     { return r.failed }
func (r *recorder) Logf(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}
func (r *recorder) end() {
	for _, f := range slices.Backward(r.cleanups) {
		f()
	}
}

func TestReport(t *testing.T) {
	for _, c := range []struct {
		failed, drawn bool
		want          string
	}{
		{false, true, ""},
		{true, true, "modalfake: fault seed 12345 (replay with BERTH_FAKE_SEED=12345)"},
		{true, false, "modalfake: fault seed 12345 (replay with BERTH_FAKE_SEED=12345); no fault was drawn from it, so the failure does not depend on it"},
	} {
		r := &recorder{failed: c.failed}
		src := NewSource(12345)
		Report(r, "modalfake", src)
		if c.drawn {
			src.Stream("x").Hit(Every(1))
		}
		r.end()
		if got := strings.Join(r.lines, "\n"); got != c.want {
			t.Errorf("failed %v, drawn %v: printed %q, want %q", c.failed, c.drawn, got, c.want)
		}
	}
}
