package manager

import (
	"context"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// Call holds what a tool call brings besides its request: who answers the
// approval questions its command or write raises, and when to move its
// foreground command to the background. Each is a parameter of the call
// (CallOption), never a value carried in the context: who may say yes
// changes what runs, and a detach changes how the call ends, so neither is
// hidden from the signature. The tap that streams a command's output as it
// comes (output.WithTap) stays in the context, as net/http/httptrace's
// ClientTrace does: it only watches, and it is read three layers down, in
// the output pipeline.
type Call struct {
	// Asker asks the user when a rule needs approval; nil means nobody
	// can be asked, so such a command or write is blocked.
	Asker approval.Asker
	// Detach, when closed while a foreground command runs, moves it to the
	// background (an MCP cancel asking for it); nil means never.
	Detach <-chan struct{}
	// Bounds, when set, are the bounds a Checkpoint passes instead of
	// the manager's configuration's (a daemon's caller's checkpoints:
	// section, read on every call).
	Bounds *config.Checkpoints
}

// A CallOption sets part of a Call, for Run, Terminal, Background,
// Process, WriteFile and Patch.
type CallOption func(*Call)

// WithAsker has the user asked through a (an MCP client's elicitation, a
// terminal prompt, the daemon's caller) when the call needs approval.
func WithAsker(a approval.Asker) CallOption {
	return func(c *Call) { c.Asker = a }
}

// WithDetach moves the call's foreground command to the background when
// ch is closed.
func WithDetach(ch <-chan struct{}) CallOption {
	return func(c *Call) { c.Detach = ch }
}

// WithCheckpointBounds has Checkpoint hold the call to b (the caller's
// checkpoints.max_per_environment and max_total_mb) instead of the
// bounds of the manager's configuration.
func WithCheckpointBounds(b config.Checkpoints) CallOption {
	return func(c *Call) { c.Bounds = &b }
}

// callOf builds the Call of opts.
func callOf(opts []CallOption) Call {
	var c Call
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Doer returns m's process-tool door with opts applied to every call, for
// process.Line.Do (the ":verb" lines of berth shell).
func (m *Manager) Doer(opts ...CallOption) process.Doer {
	return doer{m: m, opts: opts}
}

type doer struct {
	m    *Manager
	opts []CallOption
}

func (d doer) Background(ctx context.Context, key string, req terminal.Request) process.StartResult {
	return d.m.Background(ctx, key, req, d.opts...)
}

func (d doer) Process(ctx context.Context, key string, req process.Request) process.Result {
	return d.m.Process(ctx, key, req, d.opts...)
}
