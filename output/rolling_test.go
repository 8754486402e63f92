package output

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
)

const pemBlock = "-----BEGIN RSA PRIVATE KEY-----\n" + fakePEMBody + fakePEMBody + fakePEMBody + "-----END RSA PRIVATE KEY-----\n"

// leaks reports which secret fragments of pemBlock and anthropicKey s shows.
func leaks(s string) []string {
	var found []string
	for _, frag := range []string{"MIIEowIBAAKCAQEA", "VTLw7onLRnrq0", "LxoS2tFczGkPLPg", "api03-AbCd", "AbCdEfGhIjKl", "OpQrStUvWxYz"} {
		if strings.Contains(s, frag) {
			found = append(found, frag)
		}
	}
	return found
}

// TestRollingKeepsSecretsRedactedAfterFrontCut: a private key and an
// sk-ant key stay redacted in the rolling buffer however much output
// follows them and wherever its front is cut: plain text, or 400 KB of
// ANSI colour codes that clean to nothing (issue 9 defect 3, L3).
func TestRollingKeepsSecretsRedactedAfterFrontCut(t *testing.T) {
	const max = 2000
	for _, after := range []string{strings.Repeat("\x1b[m", 133_334), strings.Repeat("\x1b[1;31mx\x1b[0m ", 40_000)} {
		for extra := 0; extra < 2*len(pemBlock); extra += 97 {
			r := NewRolling(max)
			// Some of the colour codes first, so that the buffer's front
			// moves through every position of the key block.
			r.Write([]byte(strings.Repeat("y", extra) + "\n" + pemBlock + "key " + anthropicKey + "\n"))
			for i := 0; i < len(after); i += 32 << 10 {
				r.Write([]byte(after[i:min(i+32<<10, len(after))]))
				if l := leaks(r.String()); l != nil {
					t.Fatalf("after %d bytes more: buffer shows %v", i, l)
				}
			}
			r.Close()
			if l := leaks(r.String()); l != nil {
				t.Fatalf("closed: buffer shows %v", l)
			}
		}
	}
	// The codes alone keep the redacted key in view: it is redacted, not gone.
	r := NewRolling(max)
	r.Write([]byte(pemBlock + "key " + anthropicKey + "\n" + strings.Repeat("\x1b[m", 133_334) + "done"))
	got := r.String()
	if want := "-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----\nkey sk-ant-[REDACTED]\ndone"; got != want {
		t.Errorf("buffer = %q; want %q", got, want)
	}
}

// TestRollingMatchesClean: the buffer holds exactly the last MaxChars
// characters of what Clean makes of the whole stream, however it is split.
func TestRollingMatchesClean(t *testing.T) {
	parts := []string{
		"plain text ", "\n", "\r\n", "\t", "é", "中", "😀", "\xff", "\xe2\x82", "\x1b[1;31m", "\x1b[0m",
		"\x1b]0;title\x07", "\x1bP1$r0m\x1b\\", " " + openAIKey + " ", " " + jwt + " ", "PGPASSWORD=" + pgPass + "\n",
		"-----BEGIN RSA PRIVATE KEY-----\n", fakePEMBody, "-----END RSA PRIVATE KEY-----\n",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 200 {
		var in strings.Builder
		for range rng.IntN(400) {
			in.WriteString(parts[rng.IntN(len(parts))])
		}
		s := in.String()
		max := 1 + rng.IntN(3000)
		r := NewRolling(max)
		for i := 0; i < len(s); {
			n := min(len(s)-i, 1+rng.IntN(300))
			r.Write([]byte(s[i : i+n]))
			i += n
		}
		r.Close()
		if got, want := r.String(), LastChars(Clean(s), max); got != want {
			t.Fatalf("iteration %d (max %d): got %q\nwant %q", iter, max, got, want)
		}
		if got, want := r.Last(50), LastChars(Clean(s), min(50, max)); got != want {
			t.Fatalf("iteration %d: Last(50) = %q; want %q", iter, got, want)
		}
	}
}

// TestRollingShowsUnfinishedLine: while the stream is open, a line
// without its newline (a prompt) is shown, cleaned, but a secret that may
// still be incomplete at its end is not.
func TestRollingShowsUnfinishedLine(t *testing.T) {
	r := NewRolling(1000)
	r.Write([]byte("first\n\x1b[1mName:\x1b[0m "))
	if got := r.String(); got != "first\nName:" {
		t.Errorf("prompt: got %q", got)
	}
	r.Write([]byte("bob\nkey " + anthropicKey[:20]))
	if got := r.String(); got != "first\nName: bob\nkey" {
		t.Errorf("partial key: got %q", got)
	}
	r.Write([]byte(anthropicKey[20:] + " and postgres://u:hunt"))
	if got := r.String(); got != "first\nName: bob\nkey sk-ant-[REDACTED] and postgres://u:" {
		t.Errorf("partial URL password: got %q", got)
	}
	r.Write([]byte("er2@db/x\n" + pemBlock[:60]))
	if got := r.String(); got != "first\nName: bob\nkey sk-ant-[REDACTED] and postgres://u:[REDACTED]@db/x\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]" {
		t.Errorf("inside a key block: got %q", got)
	}
}

// TestRollingMemoryIsBounded: hundreds of MB of background output (lines
// of text and colour codes, and long lines without a newline) leave the
// heap bounded by the buffer, not by the output.
func TestRollingMemoryIsBounded(t *testing.T) {
	total := 300 << 20
	if raceEnabled || testing.Short() {
		total = 24 << 20
	}
	var b strings.Builder
	for b.Len() < 32<<10-200 {
		b.WriteString("\x1b[1;34mINFO\x1b[0m step é中 ok " + ghpToken + " done\n")
	}
	b.WriteString(strings.Repeat("😀", 40))
	chunk := []byte(b.String())
	r := NewRolling(200_000)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	for n := 0; n < total; n += len(chunk) {
		r.Write(chunk)
		if n%(8<<20) < len(chunk) {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	r.Close()
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapInuse)
	if grow := int64(peak) - int64(base); grow > 8<<20 {
		t.Errorf("heap grew by %d MB while streaming %d MB into a rolling buffer", grow>>20, total>>20)
	} else {
		t.Logf("streamed %d MB; peak heap growth %d KB", total>>20, grow>>10)
	}
	if got := r.String(); len([]rune(got)) != 200_000 || strings.Contains(got, ghpToken) {
		t.Errorf("buffer holds %d chars (want 200000), secret leaked: %v", len([]rune(got)), strings.Contains(got, ghpToken))
	}
}

// TestRollingConcurrentReaders: reads while writing are safe (run with
// -race) and never show a secret.
func TestRollingConcurrentReaders(t *testing.T) {
	r := NewRolling(5000)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l := leaks(r.String()); l != nil {
					t.Errorf("reader saw %v", l)
					return
				}
			}
		}()
	}
	in := strings.Repeat(pemBlock+"key "+anthropicKey+"\n"+strings.Repeat("\x1b[m", 3000), 30)
	for i := 0; i < len(in); i += 333 {
		r.Write([]byte(in[i:min(i+333, len(in))]))
	}
	close(stop)
	wg.Wait()
}
