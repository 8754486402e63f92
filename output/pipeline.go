package output

import "strings"

// stage is the one shape of every step of the cleaning pipeline, streaming
// or in memory. Write takes the next piece of the stream and passes
// whatever is ready to next, holding back only what it needs to decide
// (an incomplete UTF-8 sequence or escape sequence, a partial line,
// trailing whitespace); Flush ends the stream and passes the rest. next
// must not keep the slice it is given. clone returns an independent copy
// of the stage's state, so that what Flush would give now can be seen
// without ending the stream (an incomplete character is left out).
//
// This is the idea of golang.org/x/text/transform (one Transformer shape,
// stages composed by Chain, the same chain run over a stream or a string)
// in push form: a Transformer must fit its state in Chain's fixed 4 KiB
// buffers and copies every byte into dst, while the redactor needs up to a
// 64 KiB line of context and the sanitizer passes clean ASCII through
// without a copy.
type stage interface {
	Write(p []byte, next func([]byte))
	Flush(next func([]byte))
	clone() stage
}

// cleanStages returns the cleaning stages in their one order:
//
//  1. sanitizer: invalid UTF-8 becomes U+FFFD; ANSI, OSC, DCS, SOS, PM and
//     APC sequences and 8-bit C1 controls are stripped;
//  2. redactor: known secret shapes, PEM private key blocks, values of
//     secret-named variables, credentials in Authorization headers and
//     URLs become [REDACTED];
//  3. trimmer: trailing whitespace is dropped.
//
// Foreground capture (Capture), background buffers (Rolling) and Clean all
// run this list; adding a stage means adding it here.
func cleanStages(redact bool) []stage {
	c := new(cleaners) // one allocation for the stages and the list
	if !redact {
		c.list = [3]stage{&c.san, &c.trim}
		return c.list[:2]
	}
	c.list = [3]stage{&c.san, &c.red, &c.trim}
	return c.list[:]
}

// cleaners holds the cleaning stages and their list.
type cleaners struct {
	san  sanitizer
	red  redactor
	trim trimmer
	list [3]stage
}

// pipeline chains stages: what stage i passes on is written to stage i+1,
// and what the last one passes on goes to the sink.
type pipeline struct {
	stages []stage
	nexts  [maxStages]func([]byte) // nexts[i] receives the output of stages[i]
}

// maxStages bounds the length of a pipeline.
const maxStages = 4

func newPipeline(stages []stage, sink func([]byte)) pipeline {
	if len(stages) > maxStages {
		panic("output: too many pipeline stages")
	}
	p := pipeline{stages: stages}
	p.nexts[len(stages)-1] = sink
	for i := len(stages) - 2; i >= 0; i-- {
		st, next := stages[i+1], p.nexts[i+1]
		p.nexts[i] = func(b []byte) {
			if len(b) > 0 {
				st.Write(b, next)
			}
		}
	}
	return p
}

// Write feeds raw bytes to the first stage, in pieces of at most
// chunkSize so that no stage sees an unbounded write.
func (p *pipeline) Write(b []byte) {
	for len(b) > 0 {
		k := min(len(b), chunkSize)
		p.stages[0].Write(b[:k], p.nexts[0])
		b = b[k:]
	}
}

// Flush ends the stream: each stage in order passes on what it holds.
func (p *pipeline) Flush() {
	for i, st := range p.stages {
		st.Flush(p.nexts[i])
	}
}

// clone returns a copy of the pipeline that writes to sink; the copy and
// p do not share state.
func (p *pipeline) clone(sink func([]byte)) pipeline {
	stages := make([]stage, len(p.stages))
	for i, st := range p.stages {
		stages[i] = st.clone()
	}
	return newPipeline(stages, sink)
}

// Clean runs the whole cleaning pipeline (UTF-8 repair, escape stripping,
// redaction, trailing whitespace trim) over an in-memory string: exactly
// what a Capture or a Rolling buffer makes of the same bytes, without
// truncation.
func Clean(s string) string {
	var out []byte
	p := newPipeline(cleanStages(true), func(b []byte) { out = append(out, b...) })
	p.Write([]byte(s))
	p.Flush()
	// A run of whitespace longer than the trimmer holds is passed on.
	return strings.TrimRight(string(out), " \t\r\n\v\f")
}

// trimmer is the last cleaning stage: it holds whitespace back until
// something else follows, so that trailing whitespace is dropped at
// Flush. It holds at most holdLimit bytes; whitespace beyond that stops
// being a candidate for trimming and is passed on.
type trimmer struct {
	hold []byte
}

func (t *trimmer) Write(b []byte, next func([]byte)) {
	k := len(b) - 1
	for k >= 0 && isSpace(b[k]) {
		k--
	}
	if k < 0 {
		t.holdSpace(b, next)
		return
	}
	if len(t.hold) > 0 {
		next(t.hold)
		t.hold = t.hold[:0]
	}
	next(b[:k+1])
	t.holdSpace(b[k+1:], next)
}

func (t *trimmer) holdSpace(b []byte, next func([]byte)) {
	if len(t.hold)+len(b) > holdLimit {
		next(t.hold)
		t.hold = t.hold[:0]
		if len(b) > holdLimit {
			next(b[:len(b)-holdLimit])
			b = b[len(b)-holdLimit:]
		}
	}
	t.hold = append(t.hold, b...)
}

// Flush drops the held trailing whitespace.
func (t *trimmer) Flush(func([]byte)) { t.hold = t.hold[:0] }

func (t *trimmer) clone() stage { return &trimmer{hold: append([]byte(nil), t.hold...)} }

func isSpace(b byte) bool {
	return b == ' ' || b == '\n' || b == '\t' || b == '\r' || b == '\v' || b == '\f'
}
