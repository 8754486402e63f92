package backend

import "time"

// Event says how far a long set-up step has got: an image pull, a SIF
// build, a sandbox created or woken, a snapshot taken. It is for a person
// watching a terminal; it never reaches the agent's results.
type Event struct {
	// Step says what is happening, e.g. "pulling image python:3.12".
	Step string
	// Done and Total say how far it got, in Unit; Total 0 means unknown.
	Done, Total int64
	// Unit is "bytes", or "" for a count of steps or a step without one.
	Unit string
	// End is set on the step's last event; Err says how it ended.
	End bool
	Err error
	// Elapsed is the time since the step began.
	Elapsed time.Duration
}

// Step reports the progress of one set-up step to Options.Progress. A nil
// *Step (no one is watching) accepts every call, so backends need no
// checks of their own.
type Step struct {
	report func(Event)
	name   string
	unit   string
	start  time.Time
}

// Begin starts reporting a step; it returns nil when no one is watching.
func (o Options) Begin(step, unit string) *Step {
	if o.Progress == nil {
		return nil
	}
	s := &Step{report: o.Progress, name: step, unit: unit, start: time.Now()}
	s.report(Event{Step: step, Unit: unit})
	return s
}

// Update says how far the step got.
func (s *Step) Update(done, total int64) {
	if s == nil {
		return
	}
	s.report(Event{Step: s.name, Done: done, Total: total, Unit: s.unit, Elapsed: time.Since(s.start)})
}

// End says the step is over, and how (err nil: it succeeded).
func (s *Step) End(err error) {
	if s == nil {
		return
	}
	s.report(Event{Step: s.name, Unit: s.unit, End: true, Err: err, Elapsed: time.Since(s.start)})
}
