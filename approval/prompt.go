package approval

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// PromptAsker asks on a terminal: it prints the question to out and reads
// the answer, a line, from in (o/once, s/session, a/always, d/deny/n/no;
// an empty or unknown line denies). It is for an interactive berth shell;
// berth must not use it when in is not a terminal.
type PromptAsker struct {
	out io.Writer

	once  sync.Once
	in    io.Reader
	lines <-chan string
	mu    sync.Mutex // one question at a time
}

// NewPromptAsker returns an Asker that prompts on out and reads lines from
// in (with one reader goroutine of its own, started on the first question).
func NewPromptAsker(in io.Reader, out io.Writer) *PromptAsker {
	return &PromptAsker{in: in, out: out}
}

// NewLinePromptAsker returns an Asker that prompts on out and takes the
// answer from lines: for a program that already reads its input as lines
// (the interactive shell), so that the two never compete for a line.
func NewLinePromptAsker(lines <-chan string, out io.Writer) *PromptAsker {
	return &PromptAsker{lines: lines, out: out}
}

// start runs the one reader of in: lines go to a channel, so that a
// question that times out leaves no reader behind competing for the next.
func (p *PromptAsker) start() {
	if p.lines != nil {
		return
	}
	lines := make(chan string)
	p.lines = lines
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(p.in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
}

// Ask prints the question and waits for a line or the end of ctx. When
// the question shows only part of a long command, v (view) prints all of
// it and asks again.
func (p *PromptAsker) Ask(ctx context.Context, q Question) (Answer, error) {
	p.once.Do(p.start)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, more := Shown(q.Subject)
	choices := "[o]nce / [s]ession"
	if q.Always != "" {
		choices += " / [a]lways"
	}
	choices += " / [d]eny"
	if more > 0 {
		choices += " / [v]iew the whole command"
	}
	fmt.Fprintf(p.out, "\n%s\n%s: ", q.Text(), choices)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("%w: the terminal closed", ErrCannotAsk)
			}
			if v := strings.ToLower(strings.TrimSpace(line)); more > 0 && (v == "v" || v == "view") {
				fmt.Fprintf(p.out, "\n%s\n\n%s: ", Visible(q.Subject), choices)
				continue
			}
			return parseAnswer(line), nil
		case <-ctx.Done():
			fmt.Fprintln(p.out, "\n(no answer: denied)")
			return "", ctx.Err()
		}
	}
}

// parseAnswer reads a typed answer; anything unclear denies.
func parseAnswer(line string) Answer {
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "o", "once", "y", "yes":
		return AnswerOnce
	case "s", "session", "this session":
		return AnswerSession
	case "a", "always":
		return AnswerAlways
	}
	return AnswerDeny
}
