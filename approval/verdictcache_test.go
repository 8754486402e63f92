package approval

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// decided names a gate's decision on a command: "run" (no rule matched),
// else its outcome, how it was decided and its rule.
func decided(d *Decision) string {
	if d == nil {
		return "run"
	}
	return fmt.Sprintf("%s/%s/%s", d.Outcome, d.By, d.Rule)
}

// prefixResolve resolves paths through links, a map from a link's path to
// its target, as NativeResolve would on a machine with these links.
func prefixResolve(links map[string]string) func(string) string {
	return func(p string) string {
		for link, to := range links {
			if p == link || strings.HasPrefix(p, link+"/") {
				return to + strings.TrimPrefix(p, link)
			}
		}
		return p
	}
}

// TestVerdictCacheServesRepeats: the same command in the same context is
// scanned once; the verdict served again is the one a fresh check gives.
func TestVerdictCacheServesRepeats(t *testing.T) {
	g := NewGate(nil, GateOptions{})
	ctx := context.Background()
	for _, cmd := range []string{"true", "rm -rf src/old", "rm -rf /usr"} {
		want := decided(NewGate(nil, GateOptions{}).Command(ctx, "s", cmd, testCtx, nil))
		before := g.verdicts.hits.Load()
		for i := range 3 {
			if got := decided(g.Command(ctx, "s", cmd, testCtx, nil)); got != want {
				t.Errorf("%q, check %d: %s, want %s", cmd, i+1, got, want)
			}
		}
		if hits := g.verdicts.hits.Load() - before; hits != 2 {
			t.Errorf("%q checked 3 times in the same context: %d verdicts from the cache, want 2", cmd, hits)
		}
	}
}

// TestVerdictCacheNotStale: every input a verdict depends on, changed
// after the command was checked, gives the verdict a fresh check gives,
// not the one kept; and the first context is still served its own.
func TestVerdictCacheNotStale(t *testing.T) {
	base := testCtx
	with := func(f func(*Context)) Context {
		c := base
		f(&c)
		return c
	}
	confined := with(func(c *Context) {
		c.Writable, c.SignalsConfined = []string{"/home/dev/proj", "/tmp", "/home/dev/.berth"}, true
	})
	links := map[string]string{"/home/dev/proj/link": "/home/dev/.berth"}
	for _, tc := range []struct {
		name, cmd string
		a, b      Context
	}{
		{"cwd", "rm -rf ..", base, with(func(c *Context) { c.Cwd = "/home/dev/proj/a/b" })},
		{"home", "rm -rf /home/dev", base, with(func(c *Context) { c.Home = "/home/other" })},
		{"berth home", "echo x > /home/dev/.berth/keys.json", base, with(func(c *Context) { c.BerthHome = "/srv/b" })},
		{"config path", "echo x > /home/dev/.berth/config.yaml", with(func(c *Context) { c.BerthHome = "/srv/b" }),
			with(func(c *Context) { c.BerthHome, c.ConfigPath = "/srv/b", "/srv/b/config.yaml" })},
		{"writable", "rm -rf src/old", base, with(func(c *Context) { c.Writable = []string{"/home/dev/proj"} })},
		{"writable, empty and nil", "rm -rf src/old", with(func(c *Context) { c.Writable = []string{} }), base},
		{"protected", "echo x > ~/.berth/config.yaml", confined, func() Context { c := confined; c.Protected = []string{"/home/dev/.berth"}; return c }()},
		{"signals confined", "kill -9 -1", with(func(c *Context) { c.Writable = []string{"/home/dev/proj"} }),
			with(func(c *Context) { c.Writable, c.SignalsConfined = []string{"/home/dev/proj"}, true })},
		{"sandboxed", "rm -rf /usr", base, with(func(c *Context) { c.Sandboxed = true })},
		{"names", "myfn", base, with(func(c *Context) { c.Names = []string{"myfn"} })},
		{"definitions", "f", with(func(c *Context) { c.Names, c.Definitions = []string{"f"}, "f () \n{ \n    ls\n}\n" }),
			with(func(c *Context) { c.Names, c.Definitions = []string{"f"}, "f () \n{ \n    rm -rf /\n}\n" })},
		{"ppid", "kill -9 $PPID", with(func(c *Context) { c.PPID, c.BerthPIDs = "7", []string{"99", "123"} }),
			with(func(c *Context) { c.PPID, c.BerthPIDs = "123", []string{"99", "123"} })},
		{"berth pids", "kill -9 $PPID", with(func(c *Context) { c.PPID, c.BerthPIDs = "123", []string{"99"} }),
			with(func(c *Context) { c.PPID, c.BerthPIDs = "123", []string{"99", "123"} })},
		{"prelude", "rm -rf $D", with(func(c *Context) { c.Prelude = "D=build" }), with(func(c *Context) { c.Prelude = "D=/" })},
		{"ifs known", "X=a:b; $X", base, with(func(c *Context) { d := " \t\n"; c.IFS = &d })},
		{"ifs", "X=rm:-rf:/; $X", with(func(c *Context) { d := " \t\n"; c.IFS = &d }), with(func(c *Context) { d := ":"; c.IFS = &d })},
		{"resolve", "rm -rf build/", base, with(func(c *Context) { c.Resolve = nil })},
		{"resolve's answers", "echo x > link/config.yaml", with(func(c *Context) { c.Resolve = prefixResolve(map[string]string{}) }),
			with(func(c *Context) { c.Resolve = prefixResolve(links) })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fresh := func(c Context) string { return decided(NewGate(nil, GateOptions{}).Command(ctx, "s", tc.cmd, c, nil)) }
			wantA, wantB := fresh(tc.a), fresh(tc.b)
			if wantA == wantB {
				t.Fatalf("%q: %s in both contexts: the case does not tell a stale verdict", tc.cmd, wantA)
			}
			g := NewGate(nil, GateOptions{})
			for _, step := range []struct {
				c    Context
				want string
			}{{tc.a, wantA}, {tc.a, wantA}, {tc.b, wantB}, {tc.b, wantB}, {tc.a, wantA}} {
				if got := decided(g.Command(ctx, "s", tc.cmd, step.c, nil)); got != step.want {
					t.Fatalf("%q: %s, want %s (a fresh check's)", tc.cmd, got, step.want)
				}
			}
		})
	}
}

// TestVerdictCacheSeesChanges: what changes without the context's fields
// changing is not served a kept verdict either: a link that now points
// elsewhere (the same Resolve), the caller's lists changed in place after
// the check, the policy (its mode) replaced, and an "always" answer.
func TestVerdictCacheSeesChanges(t *testing.T) {
	ctx := context.Background()
	t.Run("link changed", func(t *testing.T) {
		links := map[string]string{"/home/dev/proj/link": "/home/dev/proj/other"}
		c := testCtx
		c.Resolve = prefixResolve(links)
		g := NewGate(nil, GateOptions{})
		cmd := "echo x > link/config.yaml"
		if got := decided(g.Command(ctx, "s", cmd, c, nil)); got != "run" {
			t.Fatalf("link to a project directory: %s, want run", got)
		}
		links["/home/dev/proj/link"] = "/home/dev/.berth"
		if got, want := decided(g.Command(ctx, "s", cmd, c, nil)), decided(NewGate(nil, GateOptions{}).Command(ctx, "s", cmd, c, nil)); got != want || got == "run" {
			t.Fatalf("link now to berth's home: %s, want %s (a fresh check's), not run", got, want)
		}
	})
	t.Run("names changed in place", func(t *testing.T) {
		c := testCtx
		c.Names = []string{"other"}
		g := NewGate(nil, GateOptions{})
		if got := decided(g.Command(ctx, "s", "myfn", c, nil)); got != "run" {
			t.Fatalf("myfn, not defined: %s, want run", got)
		}
		c.Names[0] = "myfn"
		if got := decided(g.Command(ctx, "s", "myfn", c, nil)); got == "run" {
			t.Fatalf("myfn, now a function of the session (the caller's list changed in place): run, want a check of a dynamic command")
		}
	})
	t.Run("policy replaced", func(t *testing.T) {
		g := NewGate(nil, GateOptions{})
		if got := decided(g.Command(ctx, "s", "rm -rf src/old", testCtx, nil)); !strings.HasPrefix(got, string(Blocked)) {
			t.Fatalf("manual mode, nobody to ask: %s, want blocked", got)
		}
		off := mustPolicy(t, "off", nil, nil)
		g.SetPolicy(off)
		if got := decided(g.Command(ctx, "s", "rm -rf src/old", testCtx, nil)); !strings.HasPrefix(got, string(Allowed)) {
			t.Fatalf("mode off: %s, want allowed", got)
		}
		g.SetPolicy(mustPolicy(t, "off", []string{"rm -rf src/*"}, nil))
		if got := decided(g.Command(ctx, "s", "rm -rf src/old", testCtx, nil)); !strings.HasPrefix(got, string(Blocked)) {
			t.Fatalf("mode off with a deny pattern: %s, want blocked", got)
		}
	})
	t.Run("always", func(t *testing.T) {
		var saved []string
		g := NewGate(nil, GateOptions{Persist: func(l []string) error { saved = l; return nil }})
		a := &scriptedAsker{answers: []Answer{AnswerAlways}}
		if got := decided(g.Command(ctx, "s", "git push --force", testCtx, a)); !strings.HasPrefix(got, string(ApprovedAlways)) {
			t.Fatalf("answered always: %s", got)
		}
		// Another session: no session approval, only the saved allowlist
		// can allow it without asking.
		if got := decided(g.Command(ctx, "other", "git push --force", testCtx, nil)); !strings.HasPrefix(got, string(Allowed)) {
			t.Fatalf("after always (saved %q), another session: %s, want allowed by the allowlist", saved, got)
		}
	})
}

// TestVerdictCacheKeyCoversContext: every field of Context is one the
// cache's key compares (contextKeyOf), so a field added to Context without
// a place in the key fails here rather than serving stale verdicts.
func TestVerdictCacheKeyCoversContext(t *testing.T) {
	keyed := map[string]bool{"Backend": true, "Sandboxed": true, "Writable": true, "Protected": true, "SignalsConfined": true,
		"Cwd": true, "Home": true, "BerthHome": true, "ConfigPath": true, "Resolve": true, "Prelude": true, "Names": true,
		"Definitions": true, "IFS": true, "BerthPIDs": true, "PPID": true}
	ct := reflect.TypeOf(Context{})
	for i := range ct.NumField() {
		if f := ct.Field(i); !keyed[f.Name] {
			t.Errorf("Context.%s is not in the verdict cache's key: add it to contextKey, contextKeyOf and equal, and a case to TestVerdictCacheNotStale", f.Name)
		}
	}
}
