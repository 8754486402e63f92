package daytonafake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	apiclient "github.com/daytona/clients/api-client-go"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Snapshots of sandboxes, as Daytona's API makes them (api-client-go
// v0.201.0: POST /sandbox/{sandboxIdOrName}/snapshot, GET and DELETE
// /snapshots/{id}, GET /snapshots; Daytona's code at apps/api and
// apps/runner, read for berth's fork work, 2026-11):
//
//   - POST /sandbox/{idOrName}/snapshot {name} captures a started or
//     stopped container sandbox's filesystem into a new snapshot. It
//     answers at once with the sandbox, now in state snapshotting; the
//     capture runs behind it, and the sandbox returns to the state it had
//     when it ends, whether it succeeded or not. The snapshot's record
//     exists from the start, in state snapshotting, and turns active, or
//     error with the reason (SnapshotLateRecord: the record only appears
//     once the capture succeeded). Refused: another state (400 "Sandbox must
//     be in started or stopped state to create a snapshot"), a transition
//     in flight, a capture included (409 "Sandbox state change in
//     progress"), a name the organization already has (409),
//     includeMemory on a container sandbox (400). Sources:
//     apps/api/src/sandbox/services/sandbox.service.ts
//     (createSnapshotFromSandbox, runV0SnapshotFromSandbox);
//     apps/api/src/sandbox/utils/persist-snapshot-from-sandbox.util.ts
//     (createSnapshotFromSandboxEntry, completeSnapshotFromSandbox,
//     failSnapshotFromSandbox); api/openapi.yaml (CreateSandboxSnapshot).
//   - The capture commits the container (the runner retries a failed
//     commit up to 3 times) and pushes the image to Daytona's registry;
//     a started container keeps running, its processes kept. Daytona's
//     runner pauses it for the commit (Unkind.SnapshotFreeze); the kind fake
//     commits without pausing. Sources: apps/runner/pkg/docker/
//     snapshot_sandbox.go (CreateSnapshotFromSandbox) and
//     container_commit.go (commitContainer: Pause false, maxRetries 3).
//   - The snapshot carries the sandbox's cpu, memory and disk; a sandbox
//     created from it (POST /sandbox {snapshot: id or name}) gets them, and
//     a create that names a snapshot and resources too is refused (400).
//     Its filesystem is the snapshot's; the snapshot stays usable for any
//     number of sandboxes. Source: sandbox.service.ts (createFromSnapshot:
//     "Snapshot X not found", "Snapshot X is <state>"); sandbox.controller.ts.
//   - DELETE /snapshots/{id} takes the id only (404 otherwise), puts the
//     snapshot in state removing and removes it behind the answer; sandboxes
//     made from it keep running. Source: snapshot.service.ts
//     (removeSnapshot); snapshot.controller.ts.
//
// A snapshot name the fake holds no record of stands, as before, for one of
// Daytona's general snapshots: a local image of that name.

// snapshotPullError is the reason a sandbox created from a snapshot fails
// with under Unkind.SnapshotPullFailEvery (api/openapi.yaml's example of a
// sandbox's errorReason).
const snapshotPullError = "Failed to pull snapshot image"

// commitAttempts is how many times a capture commits the container before
// it fails, as Daytona's runner does (container_commit.go, maxRetries).
const commitAttempts = 3

// snapshotRec is a snapshot made from a sandbox.
type snapshotRec struct {
	ord                 int // 1 for the first snapshot the server made...
	id, name            string
	state               apiclient.SnapshotState
	errorReason         string
	image               string // the committed image, once active
	cpu, memory, disk   int
	sizeGB              float64 // < 0: unknown
	created, updated    time.Time
	lastUsed            time.Time
	sandboxID, fromName string // the sandbox it was taken from
}

// snapshotStore holds the server's snapshots. Guarded by Server.mu.
type snapshotStore struct {
	byID        map[string]*snapshotRec
	n           int      // snapshots made so far (snapshotRec.ord)
	orphans     []string // images of removed snapshots a container still used
	failed      int      // captures failed by Unkind.SnapshotFailEvery
	pullsFailed int      // creations failed by Unkind.SnapshotPullFailEvery
}

func (st *snapshotStore) init() {
	if st.byID == nil {
		st.byID = map[string]*snapshotRec{}
	}
}

// findLocked returns the snapshot with this id, else the one with this
// name, or nil.
func (st *snapshotStore) findLocked(idOrName string) *snapshotRec {
	if rec := st.byID[idOrName]; rec != nil {
		return rec
	}
	for _, rec := range st.byID {
		if rec.name == idOrName {
			return rec
		}
	}
	return nil
}

// byNameLocked returns the snapshot named name, or nil.
func (st *snapshotStore) byNameLocked(name string) *snapshotRec {
	for _, rec := range st.byID {
		if rec.name == name {
			return rec
		}
	}
	return nil
}

// SnapshotInfo is what the fake stored for a snapshot, for tests.
type SnapshotInfo struct {
	ID, Name    string
	State       string
	ErrorReason string
	Image       string // the Docker image of an active snapshot
	SandboxID   string // the sandbox it was taken from
	CPU         int
	MemoryGiB   int
	DiskGiB     int
}

// Snapshots returns the snapshots the fake holds (removed ones are gone),
// oldest first.
func (s *Server) Snapshots() []SnapshotInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make([]*snapshotRec, 0, len(s.snaps.byID))
	for _, rec := range s.snaps.byID {
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ord < recs[j].ord })
	out := make([]SnapshotInfo, 0, len(recs))
	for _, rec := range recs {
		out = append(out, SnapshotInfo{
			ID: rec.id, Name: rec.name, State: string(rec.state), ErrorReason: rec.errorReason,
			Image: rec.image, SandboxID: rec.sandboxID, CPU: rec.cpu, MemoryGiB: rec.memory, DiskGiB: rec.disk,
		})
	}
	return out
}

// dtoLocked renders the snapshot as the API's SnapshotDto.
func (rec *snapshotRec) dtoLocked(s *Server) *apiclient.SnapshotDto {
	size := apiclient.NullableFloat32{}
	if rec.sizeGB >= 0 {
		size.Set(apiclient.PtrFloat32(float32(rec.sizeGB)))
	}
	reason := apiclient.NullableString{}
	if rec.errorReason != "" {
		reason.Set(apiclient.PtrString(rec.errorReason))
	}
	used := apiclient.NullableTime{}
	if !rec.lastUsed.IsZero() {
		t := rec.lastUsed.UTC()
		used.Set(&t)
	}
	d := apiclient.NewSnapshotDto(rec.id, false, rec.name, rec.state, size, []string{"sleep", "infinity"},
		float32(rec.cpu), 0, float32(rec.memory), float32(rec.disk), reason, rec.created.UTC(), rec.updated.UTC(), used)
	d.SetOrganizationId(s.org())
	d.SetSandboxClass("container")
	d.SetRegionIds([]string{defaultTarget})
	if rec.image != "" {
		d.SetRef(rec.image)
	}
	return d
}

// fromSnapshot sets sb up to be created from the snapshot idOrName: a
// snapshot of a sandbox the fake made (its image and resources), or a local
// image standing for one of Daytona's general snapshots. It answers 400 and
// returns false when there is no such snapshot or it is not active.
func (s *Server) fromSnapshot(w http.ResponseWriter, ctx context.Context, sb *sandbox, idOrName string) bool {
	s.mu.Lock()
	s.snaps.init()
	rec := s.snaps.findLocked(idOrName)
	if rec != nil {
		if rec.state != apiclient.SNAPSHOTSTATE_ACTIVE {
			s.mu.Unlock()
			apiError(w, http.StatusBadRequest, fmt.Sprintf("Snapshot %s is %s", idOrName, rec.state))
			return false
		}
		rec.lastUsed = time.Now()
		sb.snapshot, sb.image, sb.fromSnapshot = rec.name, rec.image, rec.id
		sb.cpu, sb.memory, sb.disk = rec.cpu, rec.memory, rec.disk
		every := fault.Every(s.opts.Unkind.SnapshotPullFailEvery)
		if every.On() && s.faults.Stream(where("snapshot pull", "snapshot "+strconv.Itoa(rec.ord))).Hit(every) {
			sb.pullFails = true
			s.snaps.pullsFailed++
		}
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	if _, err := s.docker.ImageInspect(ctx, idOrName); err != nil {
		if cerrdefs.IsNotFound(err) {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", idOrName))
		} else {
			apiError(w, http.StatusInternalServerError, fmt.Sprintf("inspect image %s: %v", idOrName, err))
		}
		return false
	}
	sb.snapshot, sb.image = idOrName, idOrName
	return true
}

// createSandboxSnapshot serves POST /sandbox/{idOrName}/snapshot.
func (s *Server) createSandboxSnapshot(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var req apiclient.CreateSandboxSnapshot
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		apiError(w, http.StatusBadRequest, "name should not be empty")
		return
	}
	if req.GetIncludeMemory() {
		apiError(w, http.StatusBadRequest, "includeMemory is only supported for Windows sandboxes")
		return
	}
	if !sb.ops.TryLock() {
		apiError(w, http.StatusConflict, "Sandbox state change in progress")
		return
	}
	late := s.opts.Unkind.SnapshotLateRecord
	now := time.Now()
	s.mu.Lock()
	s.snaps.init()
	prev := sb.state
	if prev != apiclient.SANDBOXSTATE_STARTED && prev != apiclient.SANDBOXSTATE_STOPPED {
		s.mu.Unlock()
		sb.ops.Unlock()
		apiError(w, http.StatusBadRequest, "Sandbox must be in started or stopped state to create a snapshot")
		return
	}
	if !late && s.snaps.byNameLocked(name) != nil {
		s.mu.Unlock()
		sb.ops.Unlock()
		apiError(w, http.StatusConflict, fmt.Sprintf("Snapshot with name %q already exists for this organization", name))
		return
	}
	s.snaps.n++
	rec := &snapshotRec{
		ord: s.snaps.n, id: newID(), name: name, state: apiclient.SNAPSHOTSTATE_SNAPSHOTTING,
		cpu: sb.cpu, memory: sb.memory, disk: sb.disk, sizeGB: -1,
		created: now, updated: now, sandboxID: sb.id, fromName: sb.name,
	}
	if !late {
		s.snaps.byID[rec.id] = rec
	}
	sb.state, sb.snapshotFrom, sb.updatedAt = apiclient.SANDBOXSTATE_SNAPSHOTTING, prev, now
	d := sb.dtoLocked()
	s.mu.Unlock()
	s.log.Debug("daytonafake: snapshot", "sandbox", sb.id, "snapshot", name, "from", prev)

	go func() {
		s.delay(s.ctx, where("transition", sb.ident()))
		image, sizeGB, err := s.capture(s.ctx, sb, rec, prev)
		s.mu.Lock()
		keep := false
		switch {
		case err == nil && late && s.snaps.byNameLocked(name) != nil:
			// The record is inserted at the end, where a name taken meanwhile
			// fails it; the error is swallowed (runV0SnapshotFromSandbox).
		case err == nil && late:
			keep = true
			s.snaps.byID[rec.id] = rec
		case err == nil && (s.snaps.byID[rec.id] != rec || rec.state != apiclient.SNAPSHOTSTATE_SNAPSHOTTING):
			// Removed while captured: completeSnapshotFromSandbox leaves a
			// record that is no longer snapshotting alone.
		case err == nil:
			keep = true
		case !late && rec.state == apiclient.SNAPSHOTSTATE_SNAPSHOTTING:
			rec.state, rec.errorReason, rec.updated = apiclient.SNAPSHOTSTATE_ERROR, err.Error(), time.Now()
		}
		if keep {
			rec.state, rec.image, rec.sizeGB, rec.updated, rec.lastUsed = apiclient.SNAPSHOTSTATE_ACTIVE, image, sizeGB, time.Now(), time.Now()
		}
		s.mu.Unlock()
		if !keep && image != "" {
			s.removeImage(context.WithoutCancel(s.ctx), image)
		}
		// The sandbox returns to its state and takes calls again at once
		// (Daytona clears state and pending in one update).
		s.mu.Lock()
		if sb.state == apiclient.SANDBOXSTATE_SNAPSHOTTING {
			sb.state, sb.updatedAt = prev, time.Now()
		}
		sb.snapshotFrom = ""
		sb.ops.Unlock()
		s.mu.Unlock()
		s.log.Debug("daytonafake: snapshot done", "sandbox", sb.id, "snapshot", name, "err", err)
	}()
	writeJSON(w, http.StatusOK, d)
}

// capture commits the sandbox's container into the snapshot's image and
// "pushes" it (Unkind.SnapshotDelay), returning the image and its size in
// GB. A capture that Unkind.SnapshotFailEvery hits fails after its commit,
// as a push or the capture's deadline does; its image (if any) is returned
// with the error for the caller to remove.
func (s *Server) capture(ctx context.Context, sb *sandbox, rec *snapshotRec, prev apiclient.SandboxState) (string, float64, error) {
	u := s.opts.Unkind
	fails := false
	if every := fault.Every(u.SnapshotFailEvery); every.On() {
		fails = s.faults.Stream(where("snapshot fail", sb.ident())).Hit(every)
	}
	push := s.faults.Stream(where("snapshot delay", sb.ident())).Delay(u.SnapshotDelay)
	reason := []string{
		"snapshot capture timed out after 60m",
		"failed to push image: received unexpected HTTP status: 500 Internal Server Error",
	}[s.faults.Stream(where("snapshot fail reason", sb.ident())).Choose(2)]

	id := sb.container()
	if id == "" {
		return "", 0, errors.New("the sandbox has no container")
	}
	ref := "daytonafake-snapshot/" + rec.id + ":daytona"
	if err := s.commitSnapshot(ctx, id, ref, sb.id, u.SnapshotFreeze && prev == apiclient.SANDBOXSTATE_STARTED); err != nil {
		return "", 0, err
	}
	if err := fault.Sleep(ctx, push); err != nil {
		return ref, 0, err
	}
	if fails {
		s.mu.Lock()
		s.snaps.failed++
		s.mu.Unlock()
		return ref, 0, errors.New(reason)
	}
	ins, err := s.docker.ImageInspect(ctx, ref)
	if err != nil {
		return ref, 0, fmt.Errorf("inspect committed snapshot image: %w", err)
	}
	return ref, float64(ins.Size) / (1 << 30), nil
}

// commitSnapshot commits container id to ref. With freeze, the container
// is paused for the commit, as Daytona's runner does, and every toolbox
// call to it and every process start in it waits until it is unpaused
// (starting a process in a frozen container hangs Docker's shim). A
// commit that fails (a file cut shorter while Docker copies it tears the
// commit of a running container) is taken again, up to commitAttempts
// times, as the runner does.
func (s *Server) commitSnapshot(ctx context.Context, id, ref, sandboxID string, freeze bool) error {
	if freeze {
		if err := s.gate.freeze(ctx, id); err != nil {
			return err
		}
		defer s.gate.thaw(id)
		if _, err := s.docker.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
			return fmt.Errorf("pause container for snapshot: %w", err)
		}
		defer func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if _, err := s.docker.ContainerUnpause(uctx, id, client.ContainerUnpauseOptions{}); err != nil {
				s.log.Error("daytonafake: unpause after the snapshot's commit", "container", id, "err", err)
			}
		}()
	}
	opts := client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "daytonafake snapshot of sandbox " + sandboxID,
		NoPause:   true, // paused above when it is to be
		Changes: []string{
			"LABEL " + labelFake + "=1",
			"LABEL " + labelInstance + "=" + s.inst,
			"LABEL " + labelOwnerPID + "=" + strconv.Itoa(processID),
		},
	}
	var err error
	for attempt := 1; attempt <= commitAttempts; attempt++ {
		if _, err = s.docker.ContainerCommit(ctx, id, opts); err == nil || ctx.Err() != nil {
			break
		}
		s.log.Warn("daytonafake: the commit of a snapshot failed; committing again", "container", id, "attempt", attempt, "err", err)
	}
	if err != nil {
		return fmt.Errorf("failed to commit container after %d attempts: %w", commitAttempts, err)
	}
	return nil
}

// getSnapshot serves GET /snapshots/{id} (an id or a name).
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("id")
	s.mu.Lock()
	s.snaps.init()
	rec := s.snaps.findLocked(key)
	if rec == nil {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", key))
		return
	}
	d := rec.dtoLocked(s)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

// listSnapshots serves GET /snapshots: page and limit (1 to 200), name as
// a case-insensitive part of the name, newest first.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	num := func(key string, def, lo, hi int) (int, bool) {
		v := q.Get(key)
		if v == "" {
			return def, true
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < float64(lo) || n > float64(hi) {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("%s must be a number from %d to %d", key, lo, hi))
			return 0, false
		}
		return int(n), true
	}
	page, ok := num("page", 1, 1, math.MaxInt32)
	if !ok {
		return
	}
	limit, ok := num("limit", 100, 1, 200)
	if !ok {
		return
	}
	part := strings.ToLower(q.Get("name"))
	s.mu.Lock()
	s.snaps.init()
	var recs []*snapshotRec
	for _, rec := range s.snaps.byID {
		if strings.Contains(strings.ToLower(rec.name), part) {
			recs = append(recs, rec)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ord > recs[j].ord })
	items := []apiclient.SnapshotDto{}
	for i := (page - 1) * limit; i < len(recs) && i < page*limit; i++ {
		items = append(items, *recs[i].dtoLocked(s))
	}
	total := len(recs)
	s.mu.Unlock()
	pages := (total + limit - 1) / limit
	writeJSON(w, http.StatusOK, apiclient.NewPaginatedSnapshots(items, float32(total), float32(page), float32(pages)))
}

// removeSnapshot serves DELETE /snapshots/{id}: by id only, as Daytona's
// removeSnapshot looks it up. The snapshot turns removing at once and is
// gone behind the answer; its image goes when no container uses it.
func (s *Server) removeSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	s.snaps.init()
	rec := s.snaps.byID[id]
	if rec == nil {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", id))
		return
	}
	rec.state, rec.updated = apiclient.SNAPSHOTSTATE_REMOVING, time.Now()
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.delay(s.ctx, where("snapshot removal", "snapshot "+strconv.Itoa(rec.ord)))
		s.mu.Lock()
		delete(s.snaps.byID, rec.id)
		image := rec.image
		s.mu.Unlock()
		if image != "" {
			s.removeImage(context.WithoutCancel(s.ctx), image)
		}
	}()
	w.WriteHeader(http.StatusOK)
}

// removeImage removes a snapshot's image; one a container still runs on is
// kept until sweepSnapshotImages finds it unused.
func (s *Server) removeImage(ctx context.Context, image string) {
	_, err := s.docker.ImageRemove(ctx, image, client.ImageRemoveOptions{})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err):
		s.mu.Lock()
		s.snaps.orphans = append(s.snaps.orphans, image)
		s.mu.Unlock()
	default:
		s.log.Warn("daytonafake: remove a snapshot's image", "image", image, "err", err)
	}
}

// sweepSnapshotImages removes the images of removed snapshots that no
// container uses any more.
func (s *Server) sweepSnapshotImages(ctx context.Context) {
	s.mu.Lock()
	images := s.snaps.orphans
	s.snaps.orphans = nil
	s.mu.Unlock()
	for _, image := range images {
		s.removeImage(ctx, image)
	}
}

// removeSnapshotImages removes every snapshot's image (Close, after the
// sandboxes are gone).
func (s *Server) removeSnapshotImages(ctx context.Context) error {
	s.mu.Lock()
	images := s.snaps.orphans
	s.snaps.orphans = nil
	for _, rec := range s.snaps.byID {
		if rec.image != "" {
			images = append(images, rec.image)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, image := range images {
		if _, err := s.docker.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("daytonafake: remove snapshot image %s: %w", image, err))
		}
	}
	return errors.Join(errs...)
}
