package files

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/terminal"
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

// keepsSecrets refuses content that would write the placeholder back over
// a secret the file holds: an agent that rewrites a file it read with
// read_file got the secret's lines redacted, and writing them back as it
// saw them would replace the real value with "[REDACTED]". A line of
// content is refused when it holds the placeholder and equals the redacted
// form of a line of the file that holds a secret. Content without the
// placeholder (the common case) costs nothing; a file that cannot be read
// (a new one) has no secret to lose.
func keepsSecrets(ctx context.Context, env *terminal.Environment, t target, content string) error {
	if !strings.Contains(content, output.Placeholder) {
		return nil
	}
	old, _, err := readAll(ctx, env, t, "")
	if err != nil || strings.Contains(old, output.Placeholder) {
		return nil
	}
	raw := strings.Split(old, "\n")
	hidden := map[string]bool{}
	for i, l := range redactLines(raw) {
		if l != raw[i] {
			hidden[l] = true
		}
	}
	for i, l := range strings.Split(content, "\n") {
		if strings.Contains(l, output.Placeholder) && hidden[l] {
			return fmt.Errorf("line %d of the new content holds %s where %s holds a secret berth hid when the file was read; writing it would replace the secret with the placeholder. Leave that line out of the edit (patch the lines around it), or ask the user to change it", i+1, output.Placeholder, t)
		}
	}
	return nil
}
