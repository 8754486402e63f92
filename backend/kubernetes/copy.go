package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// This file copies an environment's files through exec streams, where the
// storage cannot clone or snapshot a volume (and always for a throwaway
// pod, whose files are in no volume claim): tar runs in the pod that has
// the files and in the pod that receives them, and berth passes the
// archive from one exec stream to the other. The pod that receives them
// is a short-lived helper that mounts a checkpoint's volume claim (to take
// a checkpoint), or the new environment's own pod (to restore one, from a
// helper that mounts the checkpoint's claim read-only).
//
// What is copied is what the environment keeps: /root and /workspace
// (a persistent environment's volume claim holds exactly these, as the
// subdirectories root and workspace; a checkpoint's claim holds them the
// same way, so a clone or snapshot of either restores alike). Files
// elsewhere in the container (packages installed under /usr) are not
// carried, as a persistent environment does not keep them across a new
// pod either.

// checkpointDir is where a helper pod mounts a checkpoint's volume.
const checkpointDir = "/berth-checkpoint"

// keptDirs are the directories a checkpoint holds, relative to / in the
// environment's pod and to checkpointDir in a helper.
var keptDirs = []string{"root", "workspace"}

// tarOutScript writes an archive of the entries of root and workspace
// under the directory $1 to stdout, names relative to $1 ("root/x"): the
// directories' entries and not the directories themselves, so that
// extracting it never changes the mode or owner of /root or /workspace
// (which a non-root user could not). It reads one line first (see wrapper:
// nothing may be written before the exec's streams are registered), and
// ends with a line "berth-exit N" on stderr: the stream itself reports a
// status only as the kubelet saw it, and an empty one reads as success.
// After that line the script stays 0.2 s, as the shell's wrapper does
// (process.go): the runtime may cut short its copy of the stderr of a
// process that ends at once, and the line with it. Nothing to archive
// writes nothing.
const tarOutScript = `IFS= read -r __berth_go || exit 0
cd "$1" || { printf 'berth-exit 1\n' >&2; sleep 0.2 2>/dev/null; exit 0; }
export "$2"
set --
for d in root workspace; do
  [ -d "$d" ] && [ -r "$d" ] && [ -x "$d" ] || continue
  for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi
  done
done
s=0
if [ $# -gt 0 ]; then tar --numeric-owner -cf - "$@"; s=$?; fi
printf 'berth-exit %d\n' "$s" >&2
sleep 0.2 2>/dev/null
`

// stopMarkedScript kills the processes whose environment holds $1 (a
// copy's mark, NAME=VALUE): a source's tar whose copy failed. The exec's
// end does not end it: the runtime may keep its output pipe open without
// reading it, and tar then waits on a full pipe for as long as the pod
// lives (seen on a loaded machine: still running 30 s after the copy).
const stopMarkedScript = `IFS= read -r __berth_go || :
for f in $(grep -l -s -z -x -F -e "$1" /proc/[0-9]*/environ); do
  p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null
done
printf 'berth-exit 0\n' >&2
sleep 0.2 2>/dev/null
`

// tarInScript extracts the archive on stdin under the directory $1, after
// one line saying whether one follows ("1") or nothing does ("0"). With $2
// = 1 it first empties root and workspace there (a restore into a pod
// whose /root holds the image's files: the copy is the checkpoint's, not
// a merge). It ends with the same "berth-exit N" line as tarOutScript.
const tarInScript = `IFS= read -r __berth_go || exit 0
IFS= read -r n || n=0
cd "$1" || { printf 'berth-exit 1\n' >&2; sleep 0.2 2>/dev/null; exit 0; }
mkdir -p root workspace 2>/dev/null
if [ "$2" = 1 ]; then
  for d in root workspace; do
    for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
      if [ -e "$f" ] || [ -L "$f" ]; then rm -rf "$f" 2>/dev/null; fi
    done
  done
fi
s=0
if [ "$n" = 1 ]; then tar --numeric-owner -xf -; s=$?; fi
printf 'berth-exit %d\n' "$s" >&2
sleep 0.2 2>/dev/null
`

// endpoint is one side of a copy: a pod of the backend's namespace and the
// directory under which root and workspace are.
type endpoint struct {
	pod  string
	base string
	// ready, on the destination, waits until its pod can run the
	// extraction (its container has started); nil when it can now. The
	// source's archive is read meanwhile, readAhead bytes at most.
	ready func(context.Context) error
}

// readAhead bounds what a copy holds in memory: what the source has
// archived and the destination not yet taken, while the destination's pod
// starts or when it is slower than the source.
const readAhead = 64 << 20

// copyTree copies root and workspace from one pod to another through two
// exec streams, and returns the size of the archive. With wipe the
// destination's are emptied first. The source's exec starts at once, the
// destination's as soon as its pod is ready (to.ready): what the source
// archived meanwhile waits in memory (readAhead at most), so that the
// copy out of the source overlaps the start of the destination's pod. The
// destination learns from the first bytes whether there is anything to
// extract. A failure on either side ends the other.
func (b *Backend) copyTree(ctx context.Context, from, to endpoint, wipe bool) (int64, error) {
	srcCtx, cancelSrc := context.WithCancel(ctx)
	defer cancelSrc()
	dstCtx, cancelDst := context.WithCancel(ctx)
	defer cancelDst()
	pipe := newAheadPipe(readAhead)
	pr, pw := aheadReader{pipe}, aheadWriter{pipe}
	var n atomic.Int64
	type result struct {
		code   int
		stderr string
		err    error
	}
	srcDone := make(chan result, 1)
	// The source's tar carries a mark of this copy in its environment, so
	// that a copy that fails can stop it (stopMarkedScript).
	mark := "BERTH_COPY=" + newNonce()
	go func() {
		code, stderr, err := b.execScript(srcCtx, from.pod, tarOutScript, []string{from.base, mark}, nil, countWriter{pw, &n})
		if err == nil && code != 0 && !changedWhileRead(code, stderr) {
			err = fmt.Errorf("tar in pod %s exited with status %d: %s", from.pod, code, strings.TrimSpace(stderr))
		}
		if err != nil {
			err = fmt.Errorf("kubernetes: archive %s in pod %s: %w", strings.Join(keptDirs, " and "), from.pod, err)
			pw.CloseWithError(err)
			cancelDst()
		} else {
			pw.Close()
		}
		srcDone <- result{code, stderr, err}
	}()
	wipeArg := "0"
	if wipe {
		wipeArg = "1"
	}
	var (
		out      bytes.Buffer
		code     int
		stderr   string
		derr     error
		notReady bool
	)
	if to.ready != nil {
		derr = to.ready(dstCtx)
		notReady = derr != nil
	}
	if derr == nil {
		code, stderr, derr = b.execScript(dstCtx, to.pod, tarInScript, []string{to.base, wipeArg}, &announce{r: pr}, &cappedWriter{buf: &out, max: 4 << 10})
		if derr == nil && code != 0 {
			derr = fmt.Errorf("tar in pod %s exited with status %d: %s", to.pod, code, strings.TrimSpace(stderr+out.String()))
		}
	}
	if derr != nil {
		cancelSrc()
		pr.CloseWithError(derr)
	} else {
		// tar stops reading at the archive's end marker; what follows it
		// (the record's padding) must still be taken for the source to end.
		go io.Copy(io.Discard, pr)
	}
	src := <-srcDone
	pr.Close()
	// The cause, whichever side ended first: the source's failure (the
	// destination then fails for want of the rest of the archive), unless
	// the source only ended because the destination failed and this
	// function cancelled it.
	cancelledByDst := derr != nil && errors.Is(src.err, context.Canceled) && ctx.Err() == nil
	if cancelledByDst {
		// Its exec ended, not necessarily its tar.
		stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if _, _, err := b.execScript(stopCtx, from.pod, stopMarkedScript, []string{mark}, nil, io.Discard); err != nil {
			b.log.Warn("kubernetes: could not stop the source's tar of a failed copy", "pod", from.pod, "err", err)
		}
		cancelStop()
	}
	if src.err != nil && !cancelledByDst {
		return n.Load(), src.err
	}
	if notReady {
		return n.Load(), derr
	}
	if derr != nil {
		return n.Load(), fmt.Errorf("kubernetes: extract into pod %s: %w", to.pod, derr)
	}
	return n.Load(), nil
}

// aheadPipe is io.Pipe with a buffer: a write returns once its bytes are
// kept (max bytes at most are kept; a write past that waits for the
// reader), a read takes what is kept. Closing the write side lets the
// reader take what is kept, then its error (io.EOF); closing the read
// side drops what is kept and fails the writes with its error.
type aheadPipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks [][]byte
	size   int
	max    int
	werr   error // the write side's close: io.EOF or the writer's error
	rerr   error // the read side's close
}

func newAheadPipe(max int) *aheadPipe {
	p := &aheadPipe{max: max}
	p.cond.L = &p.mu
	return p
}

func (p *aheadPipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for p.rerr == nil && p.werr == nil && p.size >= p.max {
			p.cond.Wait()
		}
		if p.rerr != nil {
			return n, p.rerr
		}
		if p.werr != nil {
			return n, io.ErrClosedPipe
		}
		k := min(len(b), p.max-p.size)
		p.chunks = append(p.chunks, bytes.Clone(b[:k]))
		p.size += k
		n += k
		b = b[k:]
		p.cond.Broadcast()
	}
	return n, nil
}

func (p *aheadPipe) read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.chunks) == 0 && p.werr == nil && p.rerr == nil {
		p.cond.Wait()
	}
	switch {
	case p.rerr != nil:
		return 0, io.ErrClosedPipe
	case len(p.chunks) == 0:
		return 0, p.werr
	case len(b) == 0:
		return 0, nil
	}
	n := copy(b, p.chunks[0])
	if n == len(p.chunks[0]) {
		p.chunks[0] = nil
		p.chunks = p.chunks[1:]
	} else {
		p.chunks[0] = p.chunks[0][n:]
	}
	p.size -= n
	p.cond.Broadcast()
	return n, nil
}

// closeWrite ends the write side with err (nil: io.EOF).
func (p *aheadPipe) closeWrite(err error) {
	if err == nil {
		err = io.EOF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr == nil {
		p.werr = err
	}
	p.cond.Broadcast()
}

// closeRead ends the read side with err (nil: io.ErrClosedPipe).
func (p *aheadPipe) closeRead(err error) {
	if err == nil {
		err = io.ErrClosedPipe
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rerr == nil {
		p.rerr = err
		p.chunks, p.size = nil, 0
	}
	p.cond.Broadcast()
}

// aheadReader and aheadWriter are the two sides of an aheadPipe, as
// io.PipeReader and io.PipeWriter are.
type (
	aheadReader struct{ p *aheadPipe }
	aheadWriter struct{ p *aheadPipe }
)

func (r aheadReader) Read(b []byte) (int, error)     { return r.p.read(b) }
func (r aheadReader) Close() error                   { r.p.closeRead(nil); return nil }
func (r aheadReader) CloseWithError(err error) error { r.p.closeRead(err); return nil }
func (w aheadWriter) Write(b []byte) (int, error)    { return w.p.write(b) }
func (w aheadWriter) Close() error                   { w.p.closeWrite(nil); return nil }
func (w aheadWriter) CloseWithError(err error) error { w.p.closeWrite(err); return nil }

// changedWhileRead reports GNU tar's exit status 1 for files that changed
// while it read them (a log a background process writes): the archive is
// whole, as of a moment during the copy.
func changedWhileRead(code int, stderr string) bool {
	if code != 1 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.Contains(l, "file changed as we read it") {
			return false
		}
	}
	return true
}

// announce is the destination's stdin: "1\n" then the archive once its
// first bytes arrive, or "0\n" when the source ended without any.
type announce struct {
	r       io.Reader
	started bool
	pending []byte
}

func (a *announce) Read(p []byte) (int, error) {
	if !a.started {
		a.started = true
		buf := make([]byte, 32<<10)
		n, err := a.r.Read(buf)
		for n == 0 && err == nil {
			n, err = a.r.Read(buf)
		}
		switch {
		case n > 0:
			a.pending = append([]byte("1\n"), buf[:n]...)
		case err == io.EOF:
			a.pending = []byte("0\n")
		default:
			return 0, err
		}
	}
	if len(a.pending) > 0 {
		n := copy(p, a.pending)
		a.pending = a.pending[n:]
		return n, nil
	}
	return a.r.Read(p)
}

// countWriter counts what passes.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// cappedWriter keeps the first max bytes (for an error message) and takes
// the rest without keeping it.
type cappedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
	max int
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// execScript runs script with /bin/sh in the container of pod (of the
// backend's namespace), args as $1..., with stdin (after the newline the
// script reads first; nil: nothing more) and stdout attached, stderr kept
// apart, and returns the status of the script's last line "berth-exit N"
// and the rest of stderr. An exec stream that breaks, or ends without that
// line, is an error: what was copied may be short.
//
// A copy goes over SPDY first, unlike a process (process.go), and over
// WebSocket when SPDY cannot be had: through the API server's WebSocket
// translation (WebSocket to the client, SPDY to the kubelet) a checkpoint
// of 100 MiB took 4.5 to 6.5 s on the test cluster, straight over SPDY 2.3
// to 3.3 s (BenchmarkFork, alternated, load average 11). A
// transport is given up for the next only before the stream started (the
// script has not read its first line: it did nothing).
func (b *Backend) execScript(ctx context.Context, pod, script string, args []string, stdin io.Reader, stdout io.Writer) (int, string, error) {
	req := b.c.api.execRequest(b.c.namespace, pod, &corev1.PodExecOptions{
		Container: containerName,
		Command:   append([]string{"/bin/sh", "-c", script, "berth-copy"}, args...),
		Stdin:     true,
		Stdout:    true,
		Stderr:    true,
	})
	u := req.URL()
	b.mu.Lock()
	proto := b.protocol
	b.mu.Unlock()
	var executors []remotecommand.Executor
	if proto != protoWebSocket {
		ex, err := remotecommand.NewSPDYExecutor(b.c.cfg, "POST", u)
		if err != nil {
			return -1, "", fmt.Errorf("spdy transport: %w", err)
		}
		executors = append(executors, ex)
	}
	if proto != protoSPDY {
		ex, err := remotecommand.NewWebSocketExecutor(b.c.cfg, "GET", u.String())
		if err != nil {
			return -1, "", fmt.Errorf("websocket transport: %w", err)
		}
		executors = append(executors, ex)
	}
	var started atomic.Bool
	in := &firstRead{r: io.MultiReader(strings.NewReader("\n"), orEmpty(stdin)), fn: func() { started.Store(true) }}
	var errBuf bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: in, Stdout: stdout, Stderr: &cappedWriter{buf: &errBuf, max: 64 << 10}}
	var err error
	for _, ex := range executors {
		if err = ex.StreamWithContext(ctx, opts); err == nil || started.Load() || ctx.Err() != nil {
			break
		}
		b.log.Debug("kubernetes: exec for a copy refused; trying the next transport", "pod", pod, "err", err)
	}
	var ce utilexec.CodeExitError
	if err != nil && !errors.As(err, &ce) {
		if ctx.Err() != nil {
			return -1, errBuf.String(), ctx.Err()
		}
		return -1, errBuf.String(), b.c.wrap(err, "exec in pod %s", pod)
	}
	rest, code, ok := exitLine(errBuf.String())
	if !ok {
		if ctx.Err() != nil {
			return -1, rest, ctx.Err()
		}
		if err != nil {
			return -1, rest, fmt.Errorf("the copy in pod %s was killed (%v): %s", pod, err, strings.TrimSpace(rest))
		}
		return -1, rest, fmt.Errorf("the exec stream in pod %s ended without the copy's exit status (the connection to the API server was lost?)", pod)
	}
	return code, rest, nil
}

// orEmpty is r, or an empty reader for nil.
func orEmpty(r io.Reader) io.Reader {
	if r == nil {
		return strings.NewReader("")
	}
	return r
}

// exitLine splits the "berth-exit N" line off the end of a script's
// stderr.
func exitLine(stderr string) (string, int, bool) {
	s := strings.TrimRight(stderr, "\n")
	i := strings.LastIndexByte(s, '\n')
	last := s[i+1:]
	num, ok := strings.CutPrefix(last, "berth-exit ")
	if !ok {
		return stderr, -1, false
	}
	code, err := strconv.Atoi(num)
	if err != nil {
		return stderr, -1, false
	}
	return s[:max(i, 0)], code, true
}

// helperResources are a helper pod's: small, whatever the environment's
// (which may ask for a whole core and gigabytes), so that it fits beside
// the environment. Memory is limited, as a quota that wants limits asks;
// tar's page cache is reclaimed within it.
var helperResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	},
	Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
}

// helperObject is a short-lived pod that mounts a checkpoint's volume at
// checkpointDir (read-only to restore from it), to copy into or out of
// it. It is the environment's pod as podObject makes it — the same image,
// user, hardening, runtime class and node constraints — with only that
// volume, small resources, and the labels of a checkpoint's helper: the
// crash sweep removes it when the berth that made it is gone.
func (b *Backend) helperObject(name, object, ckName string, vol corev1.VolumeSource, readOnly bool) *corev1.Pod {
	p := b.podObject()
	p.Name = name
	p.Labels = checkpointLabels(b.set.Key, roleCheckpointIO, object)
	p.Annotations = checkpointAnnotations(b.set.Key, ckName)
	c := &p.Spec.Containers[0]
	c.WorkingDir = "/"
	c.Resources = *helperResources.DeepCopy()
	c.VolumeMounts = []corev1.VolumeMount{{Name: "checkpoint", MountPath: checkpointDir, ReadOnly: readOnly}}
	p.Spec.Volumes = []corev1.Volume{{Name: "checkpoint", VolumeSource: vol}}
	p.Spec.ServiceAccountName = ""
	f := false
	p.Spec.AutomountServiceAccountToken = &f
	grace := int64(1)
	p.Spec.TerminationGracePeriodSeconds = &grace
	return p
}

// startHelper creates a helper pod and waits until its container has
// started (waitStarted; terminal.kubernetes_start_timeout at most). On
// failure nothing is left.
func (b *Backend) startHelper(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, b.set.StartTimeout)
	defer cancel()
	created, err := b.c.api.pods(b.c.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return b.c.wrap(err, "create helper pod %s", pod.Name)
	}
	if _, err := b.waitStarted(ctx, created.Name, created.UID); err != nil {
		b.discard(created)
		if errors.Is(err, errPodGone) {
			return fmt.Errorf("kubernetes: helper pod %s went away while starting", pod.Name)
		}
		return err
	}
	return nil
}

// waitStarted waits until the container of the pod name (of uid, when
// known; else the first pod of that name that appears) has started, and
// returns the pod's UID: the kubelet's "Started" event for it, or the
// pod's status saying it runs, whichever comes first. The status follows
// the event by up to the kubelet's relist period (a second): 0.14 to 0.87 s
// on the test cluster. An exec works from the event on. A pod that will
// not start is reported as waitReady reports it (podReady, notReady).
func (b *Backend) waitStarted(ctx context.Context, name string, uid types.UID) (types.UID, error) {
	pods := b.c.api.pods(b.c.namespace)
	var last *corev1.Pod
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if uid != "" {
				return "", errPodGone
			}
		case err != nil:
			if ctx.Err() == nil {
				return "", b.c.wrap(err, "get pod %s", name)
			}
		case uid != "" && p.UID != uid:
			return "", errPodGone
		default:
			last = p
			if done, err := b.podReady(p); err != nil || done {
				return p.UID, err
			}
			evs, err := b.events(b.c.namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
				fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)),
				fields.OneTermEqualSelector("reason", "Started")).String()})
			if err == nil {
				for _, ev := range evs.Items {
					if strings.Contains(ev.InvolvedObject.FieldPath, "{"+containerName+"}") {
						return p.UID, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return "", fmt.Errorf("kubernetes: pod %s was not made: %w", name, ctx.Err())
			}
			return "", b.notReady(last, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// removeHelper deletes a helper pod without waiting for it to go.
func (b *Backend) removeHelper(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grace := int64(1)
	err := b.c.api.pods(b.c.namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		b.log.Warn("kubernetes: removing a checkpoint's helper pod failed; the next crash sweep removes it", "pod", name, "err", err)
	}
}
