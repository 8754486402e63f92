package daytonafake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	"github.com/moby/moby/client"
)

// nonRootUID is the uid:gid sandboxes run as with Unkind.NonRootUser.
const nonRootUID = "1000:1000"

// nonRootSetup makes the user of Unkind.NonRootUser exist in a container,
// as it does in Daytona's default snapshots: "daytona", uid 1000, home
// /home/daytona, and /root closed to it as in any Debian image.
const nonRootSetup = `grep -q '^daytona:' /etc/passwd 2>/dev/null || echo 'daytona:x:1000:1000:daytona:/home/daytona:/bin/sh' >>/etc/passwd
grep -q '^daytona:' /etc/group 2>/dev/null || echo 'daytona:x:1000:' >>/etc/group
mkdir -p /home/daytona && chown 1000:1000 /home/daytona && chmod 755 /home/daytona
chmod 700 /root 2>/dev/null
exit 0`

// defaultUser is the user a sandbox created without one reports.
func (s *Server) defaultUser() string {
	if s.opts.Unkind.NonRootUser {
		return "daytona"
	}
	return "root"
}

// addUser prepares a new container for Unkind.NonRootUser.
func (s *Server) addUser(ctx context.Context, containerID string) error {
	if !s.opts.Unkind.NonRootUser {
		return nil
	}
	var errOut bytes.Buffer
	code, err := s.runIn(ctx, containerID, execOpts{argv: []string{"/bin/sh", "-c", nonRootSetup}, user: "0"}, io.Discard, &errOut)
	if err != nil || code != 0 {
		return fmt.Errorf("add the sandbox user: exit %d: %v %s", code, err, strings.TrimSpace(errOut.String()))
	}
	return nil
}

// Disruption is something that happens to a sandbox from outside its
// client: another user of the account, Daytona's own automation, or a
// fault of the runner.
type Disruption int

// The disruptions Server.Disrupt performs.
const (
	// Stop stops the sandbox, as POST /sandbox/{id}/stop or auto-stop do:
	// every process dies, the filesystem is kept.
	Stop Disruption = iota + 1
	// Archive stops the sandbox and archives it (its filesystem moves to
	// object storage; start restores it).
	Archive
	// Delete deletes the sandbox and its filesystem.
	Delete
	// ErrorRecoverable puts the sandbox in state error with recoverable
	// set, as a runner fault does (e.g. the disk quota reached): its
	// processes die, the filesystem is kept, and POST
	// /sandbox/{id}/recover brings it back. Source: apps/api sandbox
	// service, recover ("Sandbox is not in a recoverable state" unless
	// recoverable; state must be error).
	ErrorRecoverable
	// ErrorFatal puts the sandbox in state error without recoverable:
	// recover refuses it, only delete is left.
	ErrorFatal
)

func (d Disruption) String() string {
	switch d {
	case Stop:
		return "stop"
	case Archive:
		return "archive"
	case Delete:
		return "delete"
	case ErrorRecoverable:
		return "error (recoverable)"
	case ErrorFatal:
		return "error (not recoverable)"
	}
	return fmt.Sprintf("Disruption(%d)", int(d))
}

// armedDisruption is a disruption waiting for a marker in PTY output.
type armedDisruption struct {
	sandbox string // id
	marker  []byte
	d       Disruption
	done    chan error
}

// Disrupt does d to the sandbox (by id or name) now, from outside, and
// returns once it is done: the sandbox is stopped, archived, deleted or
// in state error.
func (s *Server) Disrupt(ctx context.Context, idOrName string, d Disruption) error {
	s.mu.Lock()
	sb := s.findLocked(idOrName)
	s.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("daytonafake: disrupt: sandbox %s not found", idOrName)
	}
	sb.ops.Lock()
	defer sb.ops.Unlock()
	s.mu.Lock()
	st := sb.state
	s.mu.Unlock()
	s.log.Debug("daytonafake: disruption", "sandbox", sb.id, "disruption", d, "state", st)
	// A disruption that does not apply to the sandbox's state is an error,
	// not nothing: a test that armed it learns its premise was wrong.
	switch {
	case (d == Stop || d == ErrorRecoverable || d == ErrorFatal) && st != apiclient.SANDBOXSTATE_STARTED,
		d == Archive && st != apiclient.SANDBOXSTATE_STARTED && st != apiclient.SANDBOXSTATE_STOPPED:
		return fmt.Errorf("daytonafake: disrupt: sandbox %s is %s, which %s does not apply to", sb.id, st, d)
	}
	switch d {
	case Stop, Archive:
		if st == apiclient.SANDBOXSTATE_STARTED {
			sb.setState(apiclient.SANDBOXSTATE_STOPPING, "")
			if err := sb.stopContainer(ctx, true); err != nil {
				sb.setState(apiclient.SANDBOXSTATE_ERROR, "stop: "+err.Error())
				return err
			}
			sb.setState(apiclient.SANDBOXSTATE_STOPPED, "")
		}
		if d == Stop {
			return nil
		}
		sb.setState(apiclient.SANDBOXSTATE_ARCHIVING, "")
		if err := sb.archive(ctx); err != nil {
			sb.setState(apiclient.SANDBOXSTATE_ERROR, "archive: "+err.Error())
			return err
		}
		sb.setState(apiclient.SANDBOXSTATE_ARCHIVED, "")
		return nil
	case Delete:
		sb.setState(apiclient.SANDBOXSTATE_DESTROYING, "")
		sb.closePTYs(true)
		err := sb.removeAll(ctx)
		s.mu.Lock()
		delete(s.sandboxes, sb.id)
		sb.state = apiclient.SANDBOXSTATE_DESTROYED
		s.mu.Unlock()
		return err
	case ErrorRecoverable, ErrorFatal:
		if err := sb.stopContainer(ctx, true); err != nil {
			return err
		}
		s.mu.Lock()
		sb.state, sb.errorReason = apiclient.SANDBOXSTATE_ERROR, "the runner lost the sandbox (daytonafake disruption)"
		sb.recoverable = d == ErrorRecoverable
		sb.updatedAt = time.Now()
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("daytonafake: unknown disruption %d", int(d))
}

// DisruptOnOutput arms d for the sandbox (by id or name): the first time
// any of its PTY sessions prints marker, d is done to it, in the middle of
// whatever printed it. The returned channel receives Disrupt's result.
func (s *Server) DisruptOnOutput(idOrName, marker string, d Disruption) (<-chan error, error) {
	if marker == "" {
		return nil, errors.New("daytonafake: DisruptOnOutput needs a marker")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(idOrName)
	if sb == nil {
		return nil, fmt.Errorf("daytonafake: disrupt: sandbox %s not found", idOrName)
	}
	done := make(chan error, 1)
	s.disruptions = append(s.disruptions, armedDisruption{sandbox: sb.id, marker: []byte(marker), d: d, done: done})
	return done, nil
}

// sawOutput fires the disruptions armed for sb whose marker is in seen
// (the session's latest output, with enough of what came before).
func (s *Server) sawOutput(sb *sandbox, seen []byte) {
	s.mu.Lock()
	if len(s.disruptions) == 0 {
		s.mu.Unlock()
		return
	}
	var fire []armedDisruption
	keep := s.disruptions[:0]
	for _, a := range s.disruptions {
		if a.sandbox == sb.id && bytes.Contains(seen, a.marker) {
			fire = append(fire, a)
			continue
		}
		keep = append(keep, a)
	}
	s.disruptions = keep
	s.mu.Unlock()
	for _, a := range fire {
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
			defer cancel()
			a.done <- s.Disrupt(ctx, sb.id, a.d)
		}()
	}
}

// recoverSandbox is POST /sandbox/{idOrName}/recover: a sandbox in state
// error with recoverable set is started again, its filesystem kept.
func (s *Server) recoverSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	st, rec := sb.state, sb.recoverable
	s.mu.Unlock()
	if !rec {
		apiError(w, http.StatusBadRequest, "Sandbox is not in a recoverable state")
		return
	}
	if st != apiclient.SANDBOXSTATE_ERROR {
		apiError(w, http.StatusBadRequest, "Sandbox must be in error state to recover")
		return
	}
	s.transition(w, sb, []apiclient.SandboxState{apiclient.SANDBOXSTATE_ERROR},
		apiclient.SANDBOXSTATE_STARTING, apiclient.SANDBOXSTATE_STARTED, apiclient.SANDBOXDESIREDSTATE_STARTED, "recover",
		func(ctx context.Context, _ apiclient.SandboxState) error {
			_, err := s.docker.ContainerStart(ctx, sb.container(), client.ContainerStartOptions{})
			return err
		})
}
