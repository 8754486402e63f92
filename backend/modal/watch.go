package modal

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	modal "github.com/modal-labs/libmodal/modal-go"
)

// watcher follows one sandbox on the control plane with Modal's long poll
// (SandboxWait, which answers as soon as the sandbox finishes or after 10
// s), and closes done when the sandbox has finished: timed out,
// terminated from outside, or gone. Processes in the sandbox end their
// Wait on it, so a command whose sandbox died is reported at once even
// when the sandbox's command router stops answering (a dead worker cannot
// report its execs' deaths; the SDK would retry TaskExecWait forever).
type watcher struct {
	sb     *modal.Sandbox
	done   chan struct{} // closed when the sandbox has finished
	cancel context.CancelFunc
	exited chan struct{} // closed when the goroutine is gone

	mu   sync.Mutex
	code int   // the sandbox's exit code (124 timeout, 137 terminated), -1 if unknown
	err  error // why it is known to be finished, when not by its result
}

// watchSandbox starts following sb.
func watchSandbox(sb *modal.Sandbox, log *slog.Logger) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{sb: sb, done: make(chan struct{}), cancel: cancel, exited: make(chan struct{}), code: -1}
	go w.run(ctx, log)
	return w
}

func (w *watcher) run(ctx context.Context, log *slog.Logger) {
	defer close(w.exited)
	backoff := time.Second
	for {
		code, err := w.sb.Wait(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			w.finish(code, nil)
			return
		case isNotFound(err):
			w.finish(-1, err)
			return
		}
		// The control plane kept failing for a whole retry budget: keep
		// watching, more slowly.
		log.Warn("modal: following the sandbox failed; trying again", "sandbox", w.sb.SandboxID, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (w *watcher) finish(code int, err error) {
	w.mu.Lock()
	w.code, w.err = code, err
	w.mu.Unlock()
	close(w.done)
}

// finished reports whether the sandbox is known to have finished.
func (w *watcher) finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// reason describes how the sandbox finished, for the error of an exec it
// took down. Valid once done is closed.
func (w *watcher) reason() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Errorf("modal: sandbox %s is gone; the exec's exit status is unknown: %w", w.sb.SandboxID, w.err)
	}
	what := "finished"
	switch w.code {
	case 124:
		what = "reached its timeout (modal_sandbox_timeout)"
	case 137:
		what = "was terminated"
	}
	return fmt.Errorf("modal: sandbox %s finished (status %d: it %s) before the exec's exit status was known", w.sb.SandboxID, w.code, what)
}

// stop ends the watching and waits for its goroutine.
func (w *watcher) stop() {
	w.cancel()
	<-w.exited
}
