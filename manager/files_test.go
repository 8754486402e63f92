package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/manager"
)

// linkFarm is the scene of the N2 reproductions: a home with berth's home
// in it (berth/, holding config.yaml and .env), a harmless directory
// safe/, and a link h in work/ that points at one or the other.
type linkFarm struct {
	home, berth, safe, link string
}

func newLinkFarm(t *testing.T, home, berthHome string) *linkFarm {
	t.Helper()
	f := &linkFarm{home: home, berth: berthHome, safe: filepath.Join(home, "safe"), link: filepath.Join(home, "work", "h")}
	for _, d := range []string{f.safe, filepath.Dir(f.link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.point(t, f.safe)
	return f
}

// point makes the link point at target, atomically (a new link renamed
// over the old one, as a flipping process would).
func (f *linkFarm) point(t *testing.T, target string) {
	tmp := f.link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, f.link); err != nil {
		t.Error(err)
	}
}

// read returns the content of a file, "" when it does not exist.
func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// flipAsker answers every question once, after running flip: the link
// changes while the user is being asked, between the check and the write.
type flipAsker struct {
	flip  func()
	mu    sync.Mutex
	asked []string
}

func (a *flipAsker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	a.mu.Lock()
	a.asked = append(a.asked, q.Text())
	a.mu.Unlock()
	a.flip()
	return approval.AnswerOnce, nil
}

// TestWriteLandsWhereItWasChecked (N2): the approval gate judges where a
// file-tool write lands once its symbolic links are followed, and the
// write goes there and nowhere else. A link that changes while the user
// is being asked, a directory on the way replaced by a link, and a patch
// through a link all leave berth's home as it was.
func TestWriteLandsWhereItWasChecked(t *testing.T) {
	m, cfgPath := setupNative(t)
	home := m.Config().Getenv("HOME")
	berthHome := filepath.Dir(cfgPath)
	f := newLinkFarm(t, home, berthHome)
	secrets := filepath.Join(berthHome, ".env")
	const secret = "OPENAI_API_KEY=sk-proj-N2ORIGINAL0123456789012345678901234\nA=1\n"
	if err := os.WriteFile(secrets, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	// write_file h/.env: the user is asked about safe/.env (a .env file)
	// and says once; meanwhile h turns to berth's home.
	a := &flipAsker{flip: func() { f.point(t, berthHome) }}
	_, err := m.WriteFile(context.Background(), "k", filepath.Join(f.link, ".env"), "A=2\n", manager.WithAsker(a))
	if len(a.asked) != 1 {
		t.Fatalf("questions %q; want one (a .env file)", a.asked)
	}
	if got := read(t, secrets); got != secret {
		t.Errorf("berth's .env after a write approved for safe/.env: %q; want it untouched", got)
	}
	if err != nil || read(t, filepath.Join(f.safe, ".env")) != "A=2\n" {
		t.Errorf("the approved write: %v, safe/.env %q; want it there", err, read(t, filepath.Join(f.safe, ".env")))
	}

	// patch h/.env the same way: read from, and written back to, the file
	// the user approved.
	f.point(t, f.safe)
	a.asked = nil
	if err := os.WriteFile(filepath.Join(f.safe, ".env"), []byte("A=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = m.Patch(context.Background(), "k", filepath.Join(f.link, ".env"), "A=1", "A=3", false, manager.WithAsker(a))
	if got := read(t, secrets); got != secret {
		t.Errorf("berth's .env after a patch approved for safe/.env: %q; want it untouched", got)
	}
	if err != nil || read(t, filepath.Join(f.safe, ".env")) != "A=3\n" {
		t.Errorf("the approved patch: %v, safe/.env %q", err, read(t, filepath.Join(f.safe, ".env")))
	}

	// A directory on the way (no link at the check) becomes a link to
	// berth's home: the write fails, it is not carried there.
	real := filepath.Join(home, "real", "sub")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &flipAsker{flip: func() {
		if err := os.Rename(real, real+".away"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(berthHome, real); err != nil {
			t.Error(err)
		}
	}}
	_, err = m.WriteFile(context.Background(), "k", filepath.Join(real, ".env"), "A=4\n", manager.WithAsker(b))
	if got := read(t, secrets); got != secret {
		t.Errorf("berth's .env after a directory on the way became a link to it: %q; want it untouched", got)
	}
	if err == nil || !strings.Contains(err.Error(), "symbolic link appeared on the way") {
		t.Errorf("write through a directory replaced by a link: %v; want it refused as moved", err)
	}
}

// TestWriteRaceWithFlippingLink (N2, the review's form): a process flips
// a link between a harmless directory and berth's home while writes of
// h/config.yaml run with nobody to ask. Writes that land in berth's home
// need the user, so they are blocked; every write is checked where it
// lands, so berth's configuration never changes.
func TestWriteRaceWithFlippingLink(t *testing.T) {
	m, cfgPath := setupNative(t)
	berthHome := filepath.Dir(cfgPath)
	f := newLinkFarm(t, m.Config().Getenv("HOME"), berthHome)
	original := read(t, cfgPath)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				f.point(t, berthHome)
			} else {
				f.point(t, f.safe)
			}
		}
	}()
	// Until 50 writes were allowed (into safe/), each one a chance for the
	// link to turn to berth's home between its check and its write.
	const wantAllowed, maxWrites = 50, 20000
	var allowed, blocked, moved, other, writes int
	for i := 0; allowed < wantAllowed && i < maxWrites; i++ {
		writes++
		_, err := m.WriteFile(context.Background(), "k", filepath.Join(f.link, "config.yaml"), fmt.Sprintf("approvals:\n  mode: \"off\"\n# write %d\n", i))
		var be *approval.BlockedError
		switch {
		case err == nil:
			allowed++
		case errors.As(err, &be):
			blocked++
		case strings.Contains(err.Error(), "symbolic link appeared on the way"):
			moved++
		default:
			other++
			if other <= 3 {
				t.Logf("write %d: %v", i, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d writes: %d allowed (into safe/), %d blocked (berth's home, nobody to ask), %d refused as moved, %d failed otherwise", writes, allowed, blocked, moved, other)
	if got := read(t, cfgPath); got != original {
		t.Fatalf("berth's configuration after %d racing writes: %q; want it untouched", writes, got)
	}
	if allowed == 0 {
		t.Fatalf("no write was allowed into safe/: the race was never run")
	}
	if !strings.HasPrefix(read(t, filepath.Join(f.safe, "config.yaml")), "approvals:") {
		t.Errorf("safe/config.yaml does not hold an allowed write")
	}
}
