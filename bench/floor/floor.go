// Package floor measures the physical limits berth is compared with:
// what a trivial command and a new environment cost on an engine when
// nothing of berth stands between the caller and it. A bash kept open over
// pipes; one exec attached once through the Docker Engine API, a shell
// inside; one pods/exec stream kept open; a bare `docker run --rm IMAGE
// true`; a bare pod created, running and exec'd into.
//
// The floors are inherently per engine: they go around berth's backends
// on purpose, so they cannot be reached through the backend seam, and
// this package is the one place under bench/ that names engines. It finds
// what a floor needs from the environment berth made (the container, the
// pod, the image, the daemon or cluster berth talks to) through the
// backends' exported accessors and the engine's own API, so a floor runs
// against the same engine, image and place as berth in the same run.
// Package bench and `berth bench` stay free of backend names: they ask
// For for the floors of whatever backend they measure.
package floor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/docker"
	"github.com/a55dbaac/berth/backend/kubernetes"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/bench"
)

// Label marks the containers and pods the bare starts make (value "1"),
// so what a failed run leaves behind can be found.
const Label = "berth.floor"

// ErrNone is returned (wrapped) by For for a backend without floors here.
var ErrNone = errors.New("floor: no physical floor for this backend")

// Phase is one step of an environment's start: its name and the time from
// the start to the end of the step.
type Phase struct {
	Name string
	At   time.Duration
}

// Phases are the steps of one start, in order; the last ends the start.
type Phases []Phase

// Total is the time to the end of the last phase.
func (p Phases) Total() time.Duration {
	if len(p) == 0 {
		return 0
	}
	return p[len(p)-1].At
}

// String lists the phases with the time each took.
func (p Phases) String() string {
	var b strings.Builder
	var prev time.Duration
	for i, ph := range p {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f ms", ph.Name, float64(ph.At-prev)/float64(time.Millisecond))
		prev = ph.At
	}
	return b.String()
}

// Floors are one engine's physical limits, measured beside the berth
// environment they were made for.
type Floors struct {
	// Stream says what the kept-open stream is.
	Stream string
	// Shell opens it: a shell kept open on the engine's own stream, in
	// the same environment (container, pod, directory) as berth's.
	Shell func(ctx context.Context) (*bench.Shell, error)
	// StreamMax is the project's target for a trivial command through
	// berth, as a multiple of the Shell's round trip (0: none).
	StreamMax float64
	// Bare says what the bare start is, the floor of an environment ready
	// cold; "" when the engine has none.
	Bare string
	// BareStart runs one bare start, timing its phases.
	BareStart func(ctx context.Context) (Phases, error)
	// BareMax is the target for an environment ready cold through berth,
	// as a multiple of a bare start (0: none).
	BareMax float64
	// Ready says what ReadyStart does: the least an engine must do before
	// a persistent shell answers (create, start, open a stream, a shell's
	// first answer), with nothing of berth's; "" when the engine has none.
	Ready string
	// ReadyStart runs one, timing its phases, and removes what it made
	// (untimed).
	ReadyStart func(ctx context.Context) (Phases, error)
	// Trace, when not nil, records from the engine's own events when the
	// steps of berth's start of environment key happened (since is the
	// start); stop returns them. Nil when the engine has no such record.
	Trace func(ctx context.Context, key string, since time.Time) (stop func() Phases, err error)
	// Close releases the floors' clients.
	Close func() error
}

// For returns the floors of be's engine. opts are the options be was made
// with (its configuration and environment lookups: the same daemon,
// cluster and image). A backend without floors here gives ErrNone.
func For(ctx context.Context, be backend.Backend, opts backend.Options) (*Floors, error) {
	switch b := be.(type) {
	case *local.Local:
		return localFloors(b), nil
	case *docker.Backend:
		return dockerFloors(ctx, b, opts)
	case *kubernetes.Backend:
		return kubernetesFloors(ctx, b, opts)
	}
	return nil, fmt.Errorf("%w (%s)", ErrNone, be.Name())
}

// Time runs one start and returns its total, for series of starts.
func Time(ctx context.Context, start func(context.Context) (Phases, error)) (time.Duration, Phases, error) {
	p, err := start(ctx)
	return p.Total(), p, err
}

// clock records phases from a start time.
type clock struct {
	start time.Time
	ph    Phases
}

func newClock() *clock { return &clock{start: time.Now()} }

func (c *clock) mark(name string) { c.ph = append(c.ph, Phase{name, time.Since(c.start)}) }
