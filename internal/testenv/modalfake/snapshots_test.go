package modalfake_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	modal "github.com/modal-labs/libmodal/modal-go"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
)

// counter starts a process in sb that counts in /tmp/n, and returns a
// function reading the count.
func counter(t *testing.T, sb *modal.Sandbox) func() int {
	t.Helper()
	if _, err := sb.Exec(context.Background(), []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i >/tmp/n.tmp; mv /tmp/n.tmp /tmp/n; sleep 0.05; done"}, nil); err != nil {
		t.Fatal(err)
	}
	return func() int {
		t.Helper()
		out, errs, code := run(t, sb, "", "sh", "-c", "cat /tmp/n 2>/dev/null || echo 0")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if code != 0 || err != nil {
			t.Fatalf("read the count: %q %q exit %d", out, errs, code)
		}
		return n
	}
}

// waitCount waits until read reports more than n, failing at the deadline
// of ctx.
func waitCount(ctx context.Context, t *testing.T, read func() int, n int, what string) int {
	t.Helper()
	for {
		if m := read(); m > n {
			return m
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: the count stayed at %d", what, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A snapshot is taken of a running sandbox that keeps running: while the
// snapshot is held in progress (HoldSnapshots, so the checks fall inside
// it by construction), a process started before it goes on counting and
// execs run to their end; afterwards the sandbox still runs, and the
// snapshot holds what was written before it.
func TestSnapshotOfARunningSandboxKeepsItRunning(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run(t, sb, "", "sh", "-c", "echo before >/root/state")
	read := counter(t, sb)
	n := waitCount(ctx, t, read, 0, "before the snapshot")

	held, release := srv.HoldSnapshots()
	defer release()
	snap := make(chan error, 1)
	var img *modal.Image
	go func() {
		var err error
		img, err = sb.SnapshotFilesystem(ctx, time.Minute)
		snap <- err
	}()
	select {
	case id := <-held:
		if id != sb.SandboxID {
			t.Fatalf("held a snapshot of %s, want %s", id, sb.SandboxID)
		}
	case err := <-snap:
		t.Fatalf("the snapshot ended (%v) without being held", err)
	case <-ctx.Done():
		t.Fatal("the snapshot was never held")
	}
	n = waitCount(ctx, t, read, n, "while the snapshot is in progress")
	if out, _, code := run(t, sb, "", "echo", "during"); out != "during\n" || code != 0 {
		t.Fatalf("an exec during the snapshot: %q exit %d", out, code)
	}
	release()
	if err := <-snap; err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if code, err := sb.Poll(ctx); err != nil || code != nil {
		t.Fatalf("the sandbox after its snapshot: exit %v, %v; want it running", code, err)
	}
	waitCount(ctx, t, read, n, "after the snapshot")

	app, err := c.Apps.FromName(ctx, "fake-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := c.Sandboxes.Create(ctx, app, img, nil)
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	defer restored.Terminate(context.Background(), nil)
	if out, _, _ := run(t, restored, "", "cat", "/root/state"); out != "before\n" {
		t.Fatalf("the snapshot's /root/state: %q, want %q", out, "before\n")
	}
}

// Several sandboxes are made from one snapshot, each with its files and
// none seeing another's writes or the source's later ones; deleting the
// snapshot lets the running ones run on and makes new ones fail.
func TestSeveralSandboxesFromOneSnapshot(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx := context.Background()
	src := newSandbox(t, c, nil)
	run(t, src, "", "sh", "-c", "echo shared >/root/f")
	img, err := src.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	run(t, src, "", "sh", "-c", "echo source-later >/root/later")
	app, err := c.Apps.FromName(ctx, "fake-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	var kids []*modal.Sandbox
	for i := range 3 {
		k, err := c.Sandboxes.Create(ctx, app, img, nil)
		if err != nil {
			t.Fatalf("sandbox %d from the snapshot: %v", i, err)
		}
		t.Cleanup(func() { k.Terminate(context.Background(), nil) })
		kids = append(kids, k)
		run(t, k, "", "sh", "-c", fmt.Sprintf("echo %d >/root/mine", i))
	}
	for i, k := range kids {
		out, _, _ := run(t, k, "", "sh", "-c", "cat /root/f /root/mine; ls /root/later 2>&1 >/dev/null | wc -l")
		if want := fmt.Sprintf("shared\n%d\n1\n", i); out != want {
			t.Errorf("sandbox %d from the snapshot: %q, want %q (its own file, and no /root/later)", i, out, want)
		}
	}
	if out, _, _ := run(t, src, "", "sh", "-c", "ls /root/mine 2>&1 >/dev/null | wc -l"); out != "1\n" {
		t.Errorf("the source sees a file its copies wrote")
	}

	if err := c.Images.Delete(ctx, img.ImageID, nil); err != nil {
		t.Fatalf("delete the snapshot: %v", err)
	}
	if out, _, code := run(t, kids[0], "", "cat", "/root/f"); out != "shared\n" || code != 0 {
		t.Fatalf("a sandbox made from a deleted snapshot: %q exit %d; want it running on", out, code)
	}
	if _, err := c.Sandboxes.Create(ctx, app, img, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a sandbox from a deleted snapshot: %v, want not found", err)
	}
	if ids := srv.SnapshotImages(); len(ids) != 0 {
		t.Fatalf("snapshot images after the delete: %v", ids)
	}
	// Its content goes with the last sandbox made from it.
	for _, k := range kids {
		if _, err := k.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true}); err != nil {
			t.Fatal(err)
		}
	}
	imgs, err := dockerenv.Require(t).ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", modalfake.LabelInstance+"="+srv.Instance())})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs.Items) != 0 {
		t.Fatalf("the deleted snapshot's content stays in the daemon after its last sandbox ended: %v", imgs.Items)
	}
}

// A finished sandbox cannot be snapshotted, and nothing is kept.
func TestSnapshotOfAFinishedSandbox(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx := context.Background()
	sb := newSandbox(t, c, nil)
	if _, err := sb.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true}); err != nil {
		t.Fatal(err)
	}
	// A fresh handle: the SDK refuses calls on a handle it terminated.
	again, err := c.Sandboxes.FromID(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = again.SnapshotFilesystem(ctx, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "already finished") {
		t.Fatalf("a snapshot of a terminated sandbox: %v, want it refused", err)
	}
	if ids := srv.SnapshotImages(); len(ids) != 0 {
		t.Fatalf("a refused snapshot left images: %v", ids)
	}
}

// SnapshotInterrupted: the sandbox ends as its snapshot is asked for; the
// snapshot fails, nothing is kept, and the sandbox is finished.
func TestFaultSnapshotInterrupted(t *testing.T) {
	srv := modalfake.StartWith(t, modalfake.Faults{SnapshotInterrupted: 1})
	c := mustClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb := newSandbox(t, c, nil)
	_, err := sb.SnapshotFilesystem(ctx, time.Minute)
	var ee modal.ExecutionError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "already finished") {
		t.Fatalf("an interrupted snapshot: %v, want an ExecutionError saying the sandbox finished", err)
	}
	if code, err := sb.Wait(ctx); err != nil || code != 137 {
		t.Fatalf("the sandbox of an interrupted snapshot: exit %d, %v; want terminated (137)", code, err)
	}
	if ids := srv.SnapshotImages(); len(ids) != 0 {
		t.Fatalf("an interrupted snapshot left images: %v", ids)
	}
}

// SnapshotTTL: a snapshot's image is usable within its lifetime and
// unknown past it, to every call that names it.
func TestFaultSnapshotTTL(t *testing.T) {
	srv := modalfake.StartWith(t, modalfake.Faults{SnapshotTTL: modalfake.Jitter{Min: time.Hour}})
	c := mustClient(t, srv)
	ctx := context.Background()
	sb := newSandbox(t, c, nil)
	app, err := c.Apps.FromName(ctx, "fake-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	live, err := sb.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(modalfake.Faults{SnapshotTTL: modalfake.Jitter{Min: time.Nanosecond}})
	expired, err := sb.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Images.FromID(ctx, live.ImageID); err != nil {
		t.Fatalf("a snapshot within its lifetime: %v", err)
	}
	if _, err := c.Images.FromID(ctx, expired.ImageID); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("FromID of a snapshot past its lifetime: %v, want NotFoundError", err)
	}
	if _, err := c.Sandboxes.Create(ctx, app, expired, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a sandbox from a snapshot past its lifetime: %v, want not found", err)
	}
	if err := c.Images.Delete(ctx, expired.ImageID, nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("delete of a snapshot past its lifetime: %v, want NotFoundError", err)
	}
	if ids := srv.SnapshotImages(); len(ids) != 1 || ids[0] != live.ImageID {
		t.Fatalf("snapshot images: %v, want only %s", ids, live.ImageID)
	}
}

// A sandbox made from a snapshot that was deleted meanwhile runs on and is
// snapshotted like any other, and a sandbox made from that snapshot has
// the files of both generations.
func TestSnapshotOfASandboxFromADeletedSnapshot(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx := context.Background()
	src := newSandbox(t, c, nil)
	run(t, src, "", "sh", "-c", "echo one >/root/one")
	first, err := src.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	app, err := c.Apps.FromName(ctx, "fake-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := c.Sandboxes.Create(ctx, app, first, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kid.Terminate(context.Background(), nil) })
	if err := c.Images.Delete(ctx, first.ImageID, nil); err != nil {
		t.Fatal(err)
	}
	run(t, kid, "", "sh", "-c", "echo two >/root/two")
	second, err := kid.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatalf("snapshot of a sandbox whose image was deleted: %v", err)
	}
	grandkid, err := c.Sandboxes.Create(ctx, app, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grandkid.Terminate(context.Background(), nil) })
	if out, _, code := run(t, grandkid, "", "cat", "/root/one", "/root/two"); code != 0 || out != "one\ntwo\n" {
		t.Fatalf("a sandbox from the snapshot of a sandbox made from a deleted snapshot: %q exit %d", out, code)
	}
}
