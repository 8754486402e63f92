package files

import (
	"regexp"
	"strings"

	"github.com/a55dbaac/berth/output"
)

// The file tools show file text to the model (read_file lines, search
// matches, patch diffs and near misses). It passes through the same
// redaction as terminal output, so `read_file .env` shows no more than
// `cat .env` does. Line numbers must stay true, so the text is redacted
// line by line, and the bodies of private key blocks, which span lines,
// are followed here: each body line becomes the placeholder.

var (
	pemBeginLine = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z0-9 ]*-----`)
	pemEndLine   = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY[A-Z0-9 ]*-----`)
	// pemBodyText is a line of a key body: base64 and blanks, or an
	// RFC 1421 / OpenPGP header.
	pemBodyText = regexp.MustCompile(`^(?:[A-Za-z0-9+/=\s]*|(?:Proc-Type|DEK-Info|Version|Comment|Charset|Hash): .*)$`)
)

// redactLines returns lines with secrets replaced by output.Placeholder,
// one output line per input line. A private key block is recognised from
// its BEGIN line, and also from its END line when the lines start inside
// the block (a read at an offset): the body lines before it are redacted.
func redactLines(lines []string) []string {
	out := make([]string, len(lines))
	inKey := false
	for i, l := range lines {
		switch {
		case inKey && pemEndLine.MatchString(l):
			inKey = false
			out[i] = l
		case inKey && pemBodyText.MatchString(l):
			out[i] = redactedBody(l)
		case pemBeginLine.MatchString(l) && !pemEndLine.MatchString(l[pemBeginLine.FindStringIndex(l)[1]:]):
			// A block opens here and goes on below.
			loc := pemBeginLine.FindStringIndex(l)
			out[i] = output.Redact(l[:loc[0]]) + l[loc[0]:loc[1]]
			if strings.TrimSpace(l[loc[1]:]) != "" {
				out[i] += output.Placeholder
			}
			inKey = true
		case pemEndLine.MatchString(l) && !pemBeginLine.MatchString(l):
			// The lines started inside a block: its body is above.
			for j := i - 1; j >= 0 && out[j] == lines[j] && pemBodyText.MatchString(lines[j]) && strings.TrimSpace(lines[j]) != ""; j-- {
				out[j] = redactedBody(lines[j])
			}
			inKey = false
			out[i] = l
		default:
			inKey = false
			out[i] = output.Redact(l)
		}
	}
	return out
}

// redactedBody is what a key body line becomes: the placeholder, keeping
// a trailing carriage return.
func redactedBody(l string) string {
	if strings.HasSuffix(l, "\r") {
		return output.Placeholder + "\r"
	}
	return output.Placeholder
}

// redactText redacts a multi-line text with redactLines.
func redactText(s string) string {
	return strings.Join(redactLines(strings.Split(s, "\n")), "\n")
}
