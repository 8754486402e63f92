package files

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/a55dbaac/berth/internal/textdist"
)

// magic maps a file signature to the name of its type.
var magic = []struct {
	off  int
	sig  string
	name string
}{
	{0, "\x89PNG\r\n\x1a\n", "PNG image"},
	{0, "\xff\xd8\xff", "JPEG image"},
	{0, "GIF87a", "GIF image"},
	{0, "GIF89a", "GIF image"},
	{0, "%PDF-", "PDF document"},
	{0, "PK\x03\x04", "ZIP archive (or a format built on it: jar, docx, xlsx, apk, whl)"},
	{0, "PK\x05\x06", "ZIP archive (empty)"},
	{0, "\x1f\x8b", "gzip compressed data"},
	{0, "BZh", "bzip2 compressed data"},
	{0, "\xfd7zXZ\x00", "xz compressed data"},
	{0, "\x28\xb5\x2f\xfd", "zstd compressed data"},
	{0, "7z\xbc\xaf\x27\x1c", "7-zip archive"},
	{0, "Rar!\x1a\x07", "RAR archive"},
	{257, "ustar", "tar archive"},
	{0, "\x7fELF", "ELF executable or library"},
	{0, "MZ", "Windows executable (PE)"},
	{0, "\xcf\xfa\xed\xfe", "Mach-O binary"},
	{0, "\xca\xfe\xba\xbe", "Java class file or Mach-O universal binary"},
	{0, "\x00asm", "WebAssembly module"},
	{0, "SQLite format 3\x00", "SQLite database"},
	{0, "RIFF", "RIFF media (WAV, AVI or WebP)"},
	{0, "OggS", "Ogg media"},
	{0, "ID3", "MP3 audio"},
	{0, "fLaC", "FLAC audio"},
	{4, "ftyp", "MP4/QuickTime media"},
	{0, "\x1a\x45\xdf\xa3", "Matroska/WebM video"},
	{0, "BM", "BMP image"},
	{0, "\x00\x00\x01\x00", "ICO image"},
	{0, "II*\x00", "TIFF image"},
	{0, "MM\x00*", "TIFF image"},
	{0, "wOFF", "WOFF font"},
	{0, "wOF2", "WOFF2 font"},
	{0, "\x00\x01\x00\x00\x00", "TrueType font"},
	{0, "OTTO", "OpenType font"},
	{0, "\x80\x04\x95", "Python pickle"},
	{0, "!<arch>\n", "ar archive (static library or .deb)"},
	{0, "\xed\xab\xee\xdb", "RPM package"},
}

// binaryKind names the type of a file whose first bytes are sample, or
// returns "" when it is text (UTF-8, or Latin-1: see textKind). truncated
// reports that the file goes on after the sample, so a multi-byte character
// cut at its end is fine.
func binaryKind(sample []byte, truncated bool) string {
	kind, _ := textKind(sample, truncated)
	return kind
}

// textKind classifies a file by its first bytes: kind names the type of a
// binary file ("" for text), and latin1 reports text that is not UTF-8 but
// reads as single-byte ISO-8859-1 (Latin-1): no NUL and hardly any control
// characters. Such files are old source code, logs and configuration from
// systems that predate UTF-8; every byte is one character, so they decode
// and encode back without loss. Signatures that are also plausible text
// (BM, MZ, ID3, RIFF, ...) only count when the sample is not text.
func textKind(sample []byte, truncated bool) (kind string, latin1 bool) {
	nul := bytes.IndexByte(sample, 0) >= 0
	utf8Text := !nul && validUTF8(sample, truncated)
	latin1 = !nul && !utf8Text && singleByteText(sample)
	text := utf8Text || latin1
	for _, m := range magic {
		if len(sample) < m.off+len(m.sig) || string(sample[m.off:m.off+len(m.sig)]) != m.sig {
			continue
		}
		if text && !strongMagic(m.sig) {
			continue
		}
		return m.name, false
	}
	switch {
	case nul:
		return "binary data (contains NUL bytes)", false
	case !text:
		return "binary data (neither UTF-8 nor Latin-1 text)", false
	}
	return "", latin1
}

// singleByteText reports whether b reads as single-byte text: control
// characters other than tab, newline, carriage return, form feed, vertical
// tab and escape make up at most 1% of it (random binary data has about
// 12%).
func singleByteText(b []byte) bool {
	ctl := 0
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1b || c == 0x7f {
			ctl++
		}
	}
	return len(b) > 0 && ctl*100 <= len(b)
}

// decodeLatin1 returns the Latin-1 bytes b as UTF-8 text.
func decodeLatin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// encodeLatin1 turns text back into Latin-1 bytes. It fails, naming the
// first offending character, when s holds one that Latin-1 cannot.
func encodeLatin1(s string) (string, error) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return "", fmt.Errorf("the text holds %q (U+%04X), which Latin-1 cannot store", r, r)
		}
		b = append(b, byte(r))
	}
	return string(b), nil
}

// strongMagic reports whether a signature cannot start a text file.
func strongMagic(sig string) bool {
	for i := 0; i < len(sig); i++ {
		if sig[i] < 0x09 || sig[i] >= 0x7f {
			return true
		}
	}
	return sig == "%PDF-"
}

// validUTF8 is utf8.Valid, allowing a character cut by the end of a
// truncated sample.
func validUTF8(b []byte, truncated bool) bool {
	if utf8.Valid(b) {
		return true
	}
	if !truncated {
		return false
	}
	for cut := 1; cut <= 3 && cut < len(b); cut++ {
		if utf8.Valid(b[:len(b)-cut]) {
			return true
		}
	}
	return false
}

// similarNames returns up to n names that look like name: the same name in
// another case, a common prefix or stem, or a small edit distance.
func similarNames(name string, names []string, n int) []string {
	type scored struct {
		name  string
		score float64
	}
	lname := strings.ToLower(name)
	stem := strings.TrimSuffix(lname, extension(lname))
	var cands []scored
	for _, c := range names {
		if c == name {
			continue
		}
		lc := strings.ToLower(c)
		cstem := strings.TrimSuffix(lc, extension(lc))
		var s float64
		switch {
		case lc == lname:
			s = 1
		case stem != "" && cstem == stem:
			s = 0.9
		case len(lname) >= 3 && (strings.Contains(lc, lname) || strings.Contains(lname, lc) && len(lc) >= 3):
			s = 0.8
		default:
			d := levenshtein(lname, lc)
			longest := max(len(lname), len(lc))
			if d <= max(2, longest/3) {
				s = 0.75 - float64(d)/float64(4*longest)
			} else if p := commonPrefix(lname, lc); p >= 4 || p >= 3 && p*2 >= len(lname) {
				s = 0.5 + float64(p)/float64(10*longest)
			}
		}
		if s > 0 {
			cands = append(cands, scored{c, s})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].name < cands[j].name
	})
	var out []string
	for i := 0; i < len(cands) && i < n; i++ {
		out = append(out, cands[i].name)
	}
	return out
}

// extension is the part of name from its last dot (not a leading one).
func extension(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		return ""
	}
	return name[i:]
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// levenshtein is the edit distance between a and b in bytes; it gives up
// (returning a large number) for long names.
func levenshtein(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return 1 << 20
	}
	return textdist.Levenshtein(a, b)
}
