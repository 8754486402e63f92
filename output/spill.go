package output

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const (
	spillPrefix = "berth-output-"
	spillSuffix = ".txt"
	// SpillRetention is how long spill files are kept; older ones are
	// removed whenever a Capture finishes a spill file in the directory.
	SpillRetention = 7 * 24 * time.Hour
	// DefaultSpillMaxBytes is the default cap on the bytes of one spill
	// file (the character cap alone allows four bytes per character).
	DefaultSpillMaxBytes = 8 << 20
	// DefaultSpillDirMaxBytes is the default budget of all the spill files
	// of one directory; past it the oldest are removed.
	DefaultSpillDirMaxBytes = 256 << 20
	// spillDirMaxFiles bounds the spill files kept in one directory, and so
	// the cost of the scan that enforces the budget.
	spillDirMaxFiles = 1000
)

// spillFile writes the processed output to a private file, up to max runes
// and maxBytes bytes.
type spillFile struct {
	f        *os.File
	w        *bufio.Writer
	dir      string
	path     string
	chars    int // runes written
	bytes    int // bytes written
	max      int
	maxBytes int
	dirBytes int64 // budget of the directory
	cut      bool  // output beyond a cap was dropped
	err      error
}

// newSpill creates a spill file (mode 0600) in dir, creating dir with mode
// 0700 if it is missing.
func newSpill(dir string, opts Options) (*spillFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, spillPrefix+"*"+spillSuffix) // mode 0600
	if err != nil {
		return nil, err
	}
	return &spillFile{f: f, w: bufio.NewWriterSize(f, 64<<10), dir: dir, path: f.Name(),
		max: opts.SpillMaxChars, maxBytes: opts.SpillMaxBytes, dirBytes: opts.SpillDirMaxBytes}, nil
}

// write appends b, which holds n runes, stopping at the rune or byte cap.
func (s *spillFile) write(b []byte, n int) {
	if s.err != nil || s.cut {
		return
	}
	if s.chars+n > s.max {
		b = FirstChars(b, s.max-s.chars)
		n = s.max - s.chars
		s.cut = true
	}
	if room := s.maxBytes - s.bytes; len(b) > room {
		for room > 0 && b[room]&0xC0 == 0x80 {
			room-- // a whole rune
		}
		b = b[:room]
		n = runeCount(b)
		s.cut = true
	}
	_, s.err = s.w.Write(b)
	s.chars += n
	s.bytes += len(b)
}

// close finishes the file; when output was cut it ends with a line saying
// so. On error the partial file is removed. Then the directory is pruned
// to its age limit and budget, the new file kept.
func (s *spillFile) close(total int) error {
	defer func() { _ = pruneSpillDir(s.dir, SpillRetention, s.dirBytes, spillDirMaxFiles, s.path) }()
	if s.cut && s.err == nil {
		_, s.err = s.w.WriteString("\n\n... [FULL OUTPUT CUT - this file holds the first " +
			commafy(s.chars) + " of " + commafy(total) + " chars] ...\n")
	}
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if err := s.f.Close(); s.err == nil {
		s.err = err
	}
	if s.err != nil {
		_ = os.Remove(s.path)
	}
	return s.err
}

// PruneSpills deletes spill files (regular files named berth-output-*.txt,
// as created by Capture) in dir whose modification time is older than
// maxAge. Other files and directories are never touched. A missing dir is
// not an error; failures to remove individual files are joined.
func PruneSpills(dir string, maxAge time.Duration) error {
	return pruneSpillDir(dir, maxAge, 0, 0, "")
}

// pruneSpillDir deletes the spill files of dir older than maxAge, then the
// oldest ones until those left hold at most maxBytes bytes (when > 0) and
// number at most maxFiles (when > 0). The file keep is never deleted.
func pruneSpillDir(dir string, maxAge time.Duration, maxBytes int64, maxFiles int, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("output: prune spill directory: %w", err)
	}
	type spill struct {
		path  string
		size  int64
		mtime time.Time
	}
	var kept []spill
	var total int64
	cutoff := time.Now().Add(-maxAge)
	var errs []error
	remove := func(p string) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, spillPrefix) || !strings.HasSuffix(name, spillSuffix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		p := filepath.Join(dir, name)
		if p != keep && info.ModTime().Before(cutoff) {
			remove(p)
			continue
		}
		kept = append(kept, spill{p, info.Size(), info.ModTime()})
		total += info.Size()
	}
	over := func() bool {
		return (maxBytes > 0 && total > maxBytes) || (maxFiles > 0 && len(kept) > maxFiles)
	}
	if over() {
		sort.Slice(kept, func(i, j int) bool { return kept[i].mtime.Before(kept[j].mtime) })
		for i := 0; i < len(kept) && over(); i++ {
			if kept[i].path == keep {
				continue
			}
			remove(kept[i].path)
			total -= kept[i].size
			kept = append(kept[:i], kept[i+1:]...)
			i--
		}
	}
	return errors.Join(errs...)
}
