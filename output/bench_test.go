package output

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchChunk returns about 64 KiB of output made by repeating line.
func benchChunk(line func(i int) string) []byte {
	var b strings.Builder
	for i := 0; b.Len() < 64<<10; i++ {
		b.WriteString(line(i))
	}
	return []byte(b.String())
}

// BenchmarkCaptureThroughput measures the whole pipeline (UTF-8 repair,
// escape stripping, redaction, counting, head/tail capture) on 64 KiB
// writes of three kinds of output; MB/s is reported per kind.
func BenchmarkCaptureThroughput(b *testing.B) {
	kinds := []struct {
		name  string
		chunk []byte
	}{
		{"plain-ascii", benchChunk(func(i int) string {
			return "the quick brown fox jumps over the lazy dog while compiling file number " + strconv.Itoa(i) + "\n"
		})},
		{"build-log", benchChunk(func(i int) string {
			return "2024-05-01T12:00:00Z INFO compiling github.com/example/project/internal/module_" +
				strconv.Itoa(i) + " status=ok duration=12ms Attempt: 1\n"
		})},
		{"ansi-unicode", benchChunk(func(i int) string {
			return "\x1b[1;32m✓\x1b[0m test_" + strconv.Itoa(i) + " passed — durée 12 ms \x1b]8;;file:///x\x1b\\link\x1b]8;;\x1b\\\n"
		})},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			const perOp = 32 << 20
			b.SetBytes(perOp)
			b.ReportAllocs()
			dir := b.TempDir()
			cpu0 := cpuTime()
			ops := 0
			for b.Loop() {
				c := NewCapture(Options{SpillDir: dir})
				for n := 0; n < perOp; n += len(k.chunk) {
					c.Write(k.chunk)
				}
				res := c.Finish("")
				_ = os.Remove(res.FullOutputPath)
				ops++
			}
			// Throughput per CPU second of this process: stable when the
			// machine is shared, unlike the wall-clock MB/s.
			if d := cpuTime() - cpu0; d > 0 {
				b.ReportMetric(float64(ops)*perOp/1e6/d.Seconds(), "MB/cpu-s")
			}
		})
	}
}

// cpuTime returns the user+system CPU time used by this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSmallCommand measures the per-command overhead of the pipeline:
// a Capture fed the output of a typical short command (a few lines, one
// colour code), then finished.
func BenchmarkSmallCommand(b *testing.B) {
	out := []byte("total 12\n-rw-r--r-- 1 root root  120 Nov 23 10:00 \x1b[01;32mmain.go\x1b[0m\n-rw-r--r-- 1 root root 4096 Nov 23 10:00 go.mod\n")
	b.ReportAllocs()
	for b.Loop() {
		c := NewCapture(Options{})
		c.Write(out)
		_ = c.Finish("")
	}
}

// BenchmarkRollingThroughput measures a background process's buffer:
// cleaning on arrival plus keeping the last 200 000 characters, fed in
// 32 KiB reads of coloured log lines.
func BenchmarkRollingThroughput(b *testing.B) {
	line := "\x1b[32mok\x1b[0m step " + strings.Repeat("x", 60) + " status=ok\n"
	chunk := []byte(strings.Repeat(line, 32<<10/len(line)))
	r := NewRolling(200_000)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		r.Write(chunk)
	}
}
