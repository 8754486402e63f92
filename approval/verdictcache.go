package approval

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/a55dbaac/berth/internal/shparse"
)

// The gate keeps the verdicts of the commands it checked (the policy's,
// before any asking: "this session" answers and questions are decided
// afresh on every call), so that an agent's repeated command (ls, git
// status, the test command) is not scanned again. A verdict is served
// again only for the same text under the same policy and the same
// context, every field of it compared, and only while the context's
// Resolve still answers every path the check asked it about as it did
// then (a link made or changed since is a miss): the check is a function
// of these alone, so the same inputs give the same verdict.
const (
	// verdictCacheTexts bounds how many checks are kept; when it is
	// full, an arbitrary one goes.
	verdictCacheTexts = 256
	// verdictCacheMaxText is the longest command text kept.
	verdictCacheMaxText = 8 << 10
)

// verdictCache holds the gate's checked commands, by text.
type verdictCache struct {
	mu sync.Mutex
	m  map[string][]*cachedVerdict
	n  int
	// hits counts the verdicts served from the cache (tests).
	hits atomic.Int64
}

// cachedVerdict is one check: what it was checked under and its verdict.
type cachedVerdict struct {
	policy *Policy
	ctx    contextKey
	// resolved are the paths the check asked Context.Resolve about, with
	// the answers it got.
	resolved []resolution
	v        Verdict
}

type resolution struct{ path, to string }

// contextKey is every field of a Context the check reads, Resolve
// excepted (a function: its answers are kept in resolved instead, and
// whether there is one at all here).
type contextKey struct {
	backend, cwd, home, berthHome, configPath, prelude, definitions, ppid, ifs string
	sandboxed, signalsConfined, resolve, ifsKnown                              bool
	writable, protected, names, berthPIDs                                      []string
}

func contextKeyOf(c Context) contextKey {
	var ifs string
	if c.IFS != nil {
		ifs = *c.IFS
	}
	return contextKey{
		ifs: ifs, ifsKnown: c.IFS != nil,
		backend: c.Backend, cwd: c.Cwd, home: c.Home, berthHome: c.BerthHome, configPath: c.ConfigPath,
		prelude: c.Prelude, definitions: c.Definitions, ppid: c.PPID,
		sandboxed: c.Sandboxed, signalsConfined: c.SignalsConfined, resolve: c.Resolve != nil,
		writable: c.Writable, protected: c.Protected, names: c.Names, berthPIDs: c.BerthPIDs,
	}
}

// equal compares every field; a nil and an empty list differ (Writable
// nil means no confinement).
func (k contextKey) equal(o contextKey) bool {
	return k.backend == o.backend && k.cwd == o.cwd && k.home == o.home && k.berthHome == o.berthHome &&
		k.configPath == o.configPath && k.prelude == o.prelude && k.definitions == o.definitions && k.ppid == o.ppid &&
		k.ifs == o.ifs && k.ifsKnown == o.ifsKnown &&
		k.sandboxed == o.sandboxed && k.signalsConfined == o.signalsConfined && k.resolve == o.resolve &&
		sameList(k.writable, o.writable) && sameList(k.protected, o.protected) &&
		sameList(k.names, o.names) && sameList(k.berthPIDs, o.berthPIDs)
}

func sameList(a, b []string) bool { return (a == nil) == (b == nil) && slices.Equal(a, b) }

// clone copies the lists, so that a caller changing its own afterwards
// does not change what is kept.
func (k contextKey) clone() contextKey {
	k.writable, k.protected = slices.Clone(k.writable), slices.Clone(k.protected)
	k.names, k.berthPIDs = slices.Clone(k.names), slices.Clone(k.berthPIDs)
	return k
}

// check returns p's verdict on sc in c, from the cache when the same text
// was checked under p in the same context and c.Resolve still answers as
// it did.
func (vc *verdictCache) check(p *Policy, sc *shparse.Script, c Context) Verdict {
	text := sc.Text
	if len(text) > verdictCacheMaxText {
		return p.CheckScript(sc, c)
	}
	key := contextKeyOf(c)
	vc.mu.Lock()
	var found *cachedVerdict
	for _, e := range vc.m[text] {
		if e.policy == p && e.ctx.equal(key) {
			found = e
			break
		}
	}
	vc.mu.Unlock()
	if found != nil && stillResolves(found.resolved, c.Resolve) {
		vc.hits.Add(1)
		return found.v
	}
	var resolved []resolution
	if orig := c.Resolve; orig != nil {
		c.Resolve = func(path string) string {
			to := orig(path)
			resolved = append(resolved, resolution{path, to})
			return to
		}
	}
	v := p.CheckScript(sc, c)
	vc.put(text, &cachedVerdict{policy: p, ctx: key.clone(), resolved: resolved, v: v})
	return v
}

// stillResolves reports whether resolve answers every path as it did.
func stillResolves(rs []resolution, resolve func(string) string) bool {
	for _, r := range rs {
		if resolve(r.path) != r.to {
			return false
		}
	}
	return true
}

// put keeps e for text, in place of an entry of the same policy and
// context (whose links have changed since).
func (vc *verdictCache) put(text string, e *cachedVerdict) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	list := vc.m[text]
	for i, old := range list {
		if old.policy == e.policy && old.ctx.equal(e.ctx) {
			list[i] = e
			return
		}
	}
	if vc.n >= verdictCacheTexts {
		for t, l := range vc.m {
			vc.n -= len(l)
			delete(vc.m, t)
			break
		}
	}
	if vc.m == nil {
		vc.m = map[string][]*cachedVerdict{}
	}
	vc.m[text] = append(list, e)
	vc.n++
}

// reset forgets every verdict (the policy changed).
func (vc *verdictCache) reset() {
	vc.mu.Lock()
	vc.m, vc.n = nil, 0
	vc.mu.Unlock()
}
