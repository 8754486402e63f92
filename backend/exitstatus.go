package backend

import (
	"sync"
	"sync/atomic"
)

// ExitStatus is a process's exit status, set once: the code and the error
// its Process.Wait returns, and a channel closed when they are known. A
// backend's process keeps one and sets it from wherever the status is
// learnt first (a status message, the stream's end, Close); later sets
// are ignored. The zero value is ready to use; it is safe for concurrent
// use.
type ExitStatus struct {
	init sync.Once // makes done
	once sync.Once // sets the status
	done chan struct{}
	code int
	err  error
}

// ch returns the channel closed once the status is set.
func (s *ExitStatus) ch() chan struct{} {
	s.init.Do(func() { s.done = make(chan struct{}) })
	return s.done
}

// Set records code and err unless a status was set before, and reports
// whether this call set it.
func (s *ExitStatus) Set(code int, err error) (set bool) {
	s.once.Do(func() {
		s.code, s.err = code, err
		close(s.ch())
		set = true
	})
	return set
}

// Done returns a channel closed once the status is set.
func (s *ExitStatus) Done() <-chan struct{} { return s.ch() }

// Exited reports whether the status is set.
func (s *ExitStatus) Exited() bool {
	select {
	case <-s.ch():
		return true
	default:
		return false
	}
}

// Wait blocks until the status is set and returns it, as Process.Wait
// does.
func (s *ExitStatus) Wait() (int, error) {
	<-s.ch()
	return s.code, s.err
}

// Recreation is the flag behind Recreator: a backend sets it when it
// rebuilt its environment, and its Recreated reports that once (Take). The
// zero value is clear; it is safe for concurrent use.
type Recreation struct{ set atomic.Bool }

// Set records that the environment was rebuilt.
func (r *Recreation) Set() { r.set.Store(true) }

// Take reports whether the environment was rebuilt since the last Take,
// and clears the flag.
func (r *Recreation) Take() bool { return r.set.Swap(false) }
