package output

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	spillPrefix = "berth-output-"
	spillSuffix = ".txt"
	// SpillRetention is how long spill files are kept; older ones are
	// removed by PruneSpills when a Capture creates its first spill file.
	SpillRetention = 7 * 24 * time.Hour
)

// pruneOnce limits the opportunistic pruning to once per process.
var pruneOnce sync.Once

// spillFile writes the processed output to a private file, up to max runes.
type spillFile struct {
	f     *os.File
	w     *bufio.Writer
	path  string
	chars int // runes written
	max   int
	cut   bool // output beyond max was dropped
	err   error
}

// newSpill creates a spill file (mode 0600) in dir, creating dir with mode
// 0700 if it is missing.
func newSpill(dir string, max int) (*spillFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pruneOnce.Do(func() { _ = PruneSpills(dir, SpillRetention) })
	f, err := os.CreateTemp(dir, spillPrefix+"*"+spillSuffix) // mode 0600
	if err != nil {
		return nil, err
	}
	return &spillFile{f: f, w: bufio.NewWriterSize(f, 64<<10), path: f.Name(), max: max}, nil
}

// write appends b, which holds n runes, stopping at the rune cap.
func (s *spillFile) write(b []byte, n int) {
	if s.err != nil || s.cut {
		return
	}
	if s.chars+n > s.max {
		b = FirstChars(b, s.max-s.chars)
		n = s.max - s.chars
		s.cut = true
	}
	_, s.err = s.w.Write(b)
	s.chars += n
}

// close finishes the file; when output was cut it ends with a line saying
// so. On error the partial file is removed.
func (s *spillFile) close(total int) error {
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
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	cutoff := time.Now().Add(-maxAge)
	var errs []error
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
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
