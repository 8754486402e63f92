package daytonafake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	apiclient "github.com/daytona/clients/api-client-go"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Daytona's limits and defaults for a sandbox the request leaves open.
const (
	// MaxDiskGiB is the largest disk a sandbox may ask for; more is refused
	// with 400, as Daytona does.
	MaxDiskGiB         = 10
	defaultCPU         = 1
	defaultMemoryGiB   = 1
	defaultDiskGiB     = 3
	defaultAutoStop    = 15    // minutes
	defaultAutoArchive = 10080 // minutes (7 days)
	defaultTarget      = "us"
)

// sandbox is one sandbox and its container.
type sandbox struct {
	s   *Server
	ops sync.Mutex // held by the transition in flight
	ord int        // 1 for the first sandbox the server created, 2 for the next...

	// Guarded by s.mu.
	id, name        string
	image           string // the image its container runs
	dockerfile      string // set when built from an image
	snapshot        string
	user            string
	env, labels     map[string]string
	cpu, memory     int
	disk            int
	networkBlockAll bool
	target          string
	autoStop        int
	autoArchive     int
	autoDelete      int
	state           apiclient.SandboxState
	desired         apiclient.SandboxDesiredState
	errorReason     string
	recoverable     bool // with state error: POST /recover can bring it back
	containerID     string
	archiveImage    string // the committed filesystem while archived
	restoredFrom    string // the archive image the container now runs on, removed with it
	createdAt       time.Time
	updatedAt       time.Time
	lastActivity    time.Time
	ptys            map[string]*ptySession
	dirsOf          string // the container home and work were asked of
	home, work      string
	fromSnapshot    string                 // the id of the snapshot record it was created from ("" for an image)
	pullFails       bool                   // Unkind.SnapshotPullFailEvery hit its creation
	snapshotFrom    apiclient.SandboxState // while snapshotting: the state it returns to
}

// ident names the sandbox in the identity of its fault streams: by its
// number, which (unlike its random id) is the same in every run that
// creates sandboxes in the same order.
func (sb *sandbox) ident() string { return "sandbox " + strconv.Itoa(sb.ord) }

// SandboxInfo is what the fake stored for a sandbox, for tests.
type SandboxInfo struct {
	ID, Name         string
	State            string
	Image            string
	Env, Labels      map[string]string
	CPU, MemoryGiB   int
	DiskGiB          int
	NetworkBlockAll  bool
	AutoStopInterval int
	ContainerID      string // "" while archived
	User             string // the sandbox's user, as the API reports it
	Recoverable      bool   // in state error: recover can bring it back
}

// Sandbox returns the stored definition of a sandbox, by id or name.
func (s *Server) Sandbox(idOrName string) (SandboxInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(idOrName)
	if sb == nil {
		return SandboxInfo{}, false
	}
	return SandboxInfo{
		ID: sb.id, Name: sb.name, State: string(sb.state), Image: sb.image,
		Env: cloneMap(sb.env), Labels: cloneMap(sb.labels),
		CPU: sb.cpu, MemoryGiB: sb.memory, DiskGiB: sb.disk,
		NetworkBlockAll: sb.networkBlockAll, AutoStopInterval: sb.autoStop,
		ContainerID: sb.containerID, User: sb.user, Recoverable: sb.recoverable,
	}, true
}

// SandboxIDs returns the ids of the sandboxes the fake holds (deleted
// ones are gone from it).
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// WaitState waits until the sandbox (by id or name) is in one of states,
// and fails when it goes to error or build_failed, or is gone.
func (s *Server) WaitState(ctx context.Context, idOrName string, states ...string) error {
	for {
		s.mu.Lock()
		sb := s.findLocked(idOrName)
		var st apiclient.SandboxState
		var reason string
		if sb != nil {
			st, reason = sb.state, sb.errorReason
		}
		s.mu.Unlock()
		if sb == nil {
			return fmt.Errorf("daytonafake: sandbox %s not found", idOrName)
		}
		for _, want := range states {
			if string(st) == want {
				return nil
			}
		}
		if st == apiclient.SANDBOXSTATE_ERROR || st == apiclient.SANDBOXSTATE_BUILD_FAILED {
			return fmt.Errorf("daytonafake: sandbox %s is %s: %s", idOrName, st, reason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("daytonafake: sandbox %s still %s: %w", idOrName, st, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// findLocked looks a live sandbox up by id, then by name.
func (s *Server) findLocked(idOrName string) *sandbox {
	if sb, ok := s.sandboxes[idOrName]; ok {
		return sb
	}
	for _, sb := range s.sandboxes {
		if sb.name == idOrName {
			return sb
		}
	}
	return nil
}

// lookup finds the sandbox named in the request path, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *sandbox {
	key := r.PathValue("idOrName")
	s.mu.Lock()
	sb := s.findLocked(key)
	s.mu.Unlock()
	if sb == nil {
		apiError(w, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", key))
	}
	return sb
}

// dtoLocked renders the sandbox as the API's Sandbox model.
func (sb *sandbox) dtoLocked() *apiclient.Sandbox {
	d := apiclient.NewSandbox(sb.id, sb.s.org(), sb.name, sb.user, cloneMap(sb.env), cloneMap(sb.labels),
		false, sb.networkBlockAll, sb.target, float32(sb.cpu), 0, float32(sb.memory), float32(sb.disk),
		sb.s.ToolboxProxyURL())
	d.SetState(sb.state)
	d.SetDesiredState(sb.desired)
	if sb.errorReason != "" {
		d.SetErrorReason(sb.errorReason)
	}
	if sb.state == apiclient.SANDBOXSTATE_ERROR {
		d.SetRecoverable(sb.recoverable)
	}
	if sb.snapshot != "" {
		d.SetSnapshot(sb.snapshot)
	}
	d.SetAutoStopInterval(float32(sb.autoStop))
	d.SetAutoArchiveInterval(float32(sb.autoArchive))
	d.SetAutoDeleteInterval(float32(sb.autoDelete))
	d.SetCreatedAt(sb.createdAt.UTC().Format(time.RFC3339Nano))
	d.SetUpdatedAt(sb.updatedAt.UTC().Format(time.RFC3339Nano))
	d.SetLastActivityAt(sb.lastActivity.UTC().Format(time.RFC3339Nano))
	d.SetSandboxClass("container")
	d.SetDaemonVersion("daytonafake")
	d.SetRunnerId("daytonafake-runner")
	if sb.dockerfile != "" {
		t := sb.createdAt.UTC()
		d.SetBuildInfo(apiclient.BuildInfo{DockerfileContent: &sb.dockerfile, CreatedAt: t, UpdatedAt: t, SnapshotRef: sb.image})
	}
	return d
}

// listItemLocked renders the sandbox as a list item.
func (sb *sandbox) listItemLocked() apiclient.SandboxListItem {
	it := apiclient.NewSandboxListItem(sb.id, sb.s.org(), sb.name, sb.target, sb.user, false,
		float32(sb.cpu), 0, float32(sb.memory), float32(sb.disk), cloneMap(sb.labels), sb.s.ToolboxProxyURL())
	it.SetState(sb.state)
	it.SetDesiredState(sb.desired)
	if sb.errorReason != "" {
		it.SetErrorReason(sb.errorReason)
	}
	if sb.snapshot != "" {
		it.SetSnapshot(sb.snapshot)
	}
	it.SetAutoStopInterval(float32(sb.autoStop))
	it.SetCreatedAt(sb.createdAt.UTC().Format(time.RFC3339Nano))
	it.SetUpdatedAt(sb.updatedAt.UTC().Format(time.RFC3339Nano))
	return *it
}

// setState moves the sandbox to st.
func (sb *sandbox) setState(st apiclient.SandboxState, reason string) {
	sb.s.mu.Lock()
	sb.state, sb.errorReason, sb.recoverable = st, reason, false
	sb.updatedAt = time.Now()
	sb.s.mu.Unlock()
	sb.s.log.Debug("daytonafake: sandbox state", "sandbox", sb.id, "state", st, "reason", reason)
}

// reply writes the sandbox's current DTO.
func (s *Server) reply(w http.ResponseWriter, sb *sandbox) {
	s.mu.Lock()
	d := sb.dtoLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

// parseDockerfile accepts the one kind of build the fake can do without a
// registry: a Dockerfile whose only instruction is FROM <local image>.
func parseDockerfile(df string) (string, error) {
	var from string
	for _, l := range strings.Split(df, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 || !strings.EqualFold(f[0], "FROM") || from != "" {
			return "", fmt.Errorf("the fake builds only a Dockerfile of one line \"FROM <image>\", got %q", df)
		}
		from = f[1]
	}
	if from == "" {
		return "", fmt.Errorf("the Dockerfile has no FROM line: %q", df)
	}
	return from, nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req apiclient.CreateSandbox
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if req.BuildInfo != nil && req.Snapshot != nil && *req.Snapshot != "" {
		apiError(w, http.StatusBadRequest, "Cannot specify a snapshot when using a build info entry")
		return
	}
	if req.BuildInfo == nil && (req.Cpu != nil && *req.Cpu != 0 || req.Gpu != nil && *req.Gpu != 0 ||
		req.Memory != nil && *req.Memory != 0 || req.Disk != nil && *req.Disk != 0) {
		// Source: apps/api/src/sandbox/controllers/sandbox.controller.ts
		// (createSandbox): a sandbox made from a snapshot gets the
		// snapshot's resources.
		apiError(w, http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot")
		return
	}
	now := time.Now()
	sb := &sandbox{
		s: s, id: newID(), user: s.defaultUser(), env: map[string]string{}, labels: map[string]string{},
		cpu: defaultCPU, memory: defaultMemoryGiB, disk: defaultDiskGiB, target: defaultTarget,
		autoStop: defaultAutoStop, autoArchive: defaultAutoArchive, autoDelete: -1,
		state: apiclient.SANDBOXSTATE_CREATING, desired: apiclient.SANDBOXDESIREDSTATE_STARTED,
		createdAt: now, updatedAt: now, lastActivity: now, ptys: map[string]*ptySession{},
	}
	sb.name = sb.id
	if req.Name != nil && *req.Name != "" {
		sb.name = *req.Name
	}
	if req.Env != nil {
		sb.env = cloneMap(*req.Env)
	}
	if req.Labels != nil {
		sb.labels = cloneMap(*req.Labels)
	}
	if req.User != nil && *req.User != "" {
		sb.user = *req.User
	}
	if req.Target != nil && *req.Target != "" {
		sb.target = *req.Target
	}
	if req.NetworkBlockAll != nil {
		sb.networkBlockAll = *req.NetworkBlockAll
	}
	for name, p := range map[string]*int32{"cpu": req.Cpu, "memory": req.Memory, "disk": req.Disk} {
		if p != nil && *p < 1 {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("%s must be at least 1, got %d", name, *p))
			return
		}
	}
	if req.Cpu != nil {
		sb.cpu = int(*req.Cpu)
	}
	if req.Memory != nil {
		sb.memory = int(*req.Memory)
	}
	if req.Disk != nil {
		if *req.Disk > MaxDiskGiB {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("Disk request %dGB exceeds maximum allowed per sandbox (%dGB)", *req.Disk, MaxDiskGiB))
			return
		}
		sb.disk = int(*req.Disk)
	}
	if req.AutoStopInterval != nil {
		sb.autoStop = int(*req.AutoStopInterval)
	}
	if req.AutoArchiveInterval != nil && *req.AutoArchiveInterval > 0 {
		sb.autoArchive = int(*req.AutoArchiveInterval)
	}
	if req.AutoDeleteInterval != nil {
		sb.autoDelete = int(*req.AutoDeleteInterval)
	}
	var buildErr error
	switch {
	case req.BuildInfo != nil:
		sb.dockerfile = req.BuildInfo.DockerfileContent
		sb.image, buildErr = parseDockerfile(sb.dockerfile)
		sb.state = apiclient.SANDBOXSTATE_PENDING_BUILD
	case req.Snapshot != nil && *req.Snapshot != "":
		if !s.fromSnapshot(w, r.Context(), sb, *req.Snapshot) {
			return
		}
	default:
		sb.image = s.opts.DefaultImage
		sb.snapshot = s.opts.DefaultImage
	}
	if sb.image == "" && buildErr == nil {
		apiError(w, http.StatusBadRequest, "no snapshot or build given and the fake has no default image")
		return
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		apiError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	for _, o := range s.sandboxes {
		if o.name == sb.name {
			s.mu.Unlock()
			apiError(w, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", sb.name))
			return
		}
	}
	s.nSandboxes++
	sb.ord = s.nSandboxes
	s.sandboxes[sb.id] = sb
	d := sb.dtoLocked()
	s.mu.Unlock()

	sb.ops.Lock()
	go func() {
		defer sb.ops.Unlock()
		s.delay(s.ctx, where("transition", sb.ident()))
		if buildErr != nil {
			sb.setState(apiclient.SANDBOXSTATE_BUILD_FAILED, buildErr.Error())
			return
		}
		if sb.pullFails {
			sb.setState(apiclient.SANDBOXSTATE_ERROR, snapshotPullError)
			return
		}
		if err := sb.create(s.ctx); err != nil {
			st := apiclient.SANDBOXSTATE_ERROR
			if sb.dockerfile != "" {
				st = apiclient.SANDBOXSTATE_BUILD_FAILED
			}
			sb.setState(st, err.Error())
			return
		}
		sb.setState(apiclient.SANDBOXSTATE_STARTED, "")
	}()
	writeJSON(w, http.StatusOK, d)
}

// newID returns a sandbox id shaped like Daytona's (a UUID).
func newID() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// create makes and starts the sandbox's container from its image.
func (sb *sandbox) create(ctx context.Context) error {
	sb.s.mu.Lock()
	image := sb.image
	if sb.dockerfile != "" {
		sb.state = apiclient.SANDBOXSTATE_BUILDING_SNAPSHOT
	}
	sb.s.mu.Unlock()
	if _, err := sb.s.docker.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not present locally and the fake cannot pull images", image)
		}
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	sb.setState(apiclient.SANDBOXSTATE_CREATING, "")
	sb.s.mu.Lock()
	k, poolable := sb.poolKeyLocked(image)
	sb.s.mu.Unlock()
	if poolable {
		if id, ok := sb.s.takeWarm(k); ok {
			sb.s.mu.Lock()
			sb.containerID = id
			sb.s.mu.Unlock()
			return nil
		}
	}
	if err := sb.runContainer(ctx, image); err != nil {
		return err
	}
	if poolable {
		sb.s.refillWarm(k)
	}
	return nil
}

// runContainer creates and starts the container from image with the
// sandbox's settings.
func (sb *sandbox) runContainer(ctx context.Context, image string) error {
	s := sb.s
	s.mu.Lock()
	env := make([]string, 0, len(sb.env))
	for k, v := range sb.env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cfg := &container.Config{
		Image:      image,
		Entrypoint: []string{"sleep", "infinity"},
		Cmd:        []string{},
		Env:        env,
		Hostname:   sb.id[:8],
		Labels: map[string]string{
			labelFake: "1", labelInstance: s.inst, labelOwnerPID: strconv.Itoa(processID), labelSandbox: sb.id,
		},
	}
	if s.opts.Unkind.NonRootUser {
		cfg.User = nonRootUID
	}
	init := true
	hc := &container.HostConfig{Init: &init}
	hc.NanoCPUs = int64(sb.cpu) * 1e9
	hc.Memory = int64(sb.memory) << 30
	if sb.networkBlockAll {
		hc.NetworkMode = "none"
	}
	name := "daytonafake-" + sb.id
	s.mu.Unlock()

	res, err := s.docker.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	if _, err := s.docker.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		s.docker.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return fmt.Errorf("start container: %w", err)
	}
	if err := s.addUser(ctx, res.ID); err != nil {
		s.docker.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return err
	}
	s.mu.Lock()
	sb.containerID = res.ID
	s.mu.Unlock()
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	if sb := s.lookup(w, r); sb != nil {
		s.reply(w, sb)
	}
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var labels map[string]string
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &labels); err != nil {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("labels must be a JSON object of strings: %v", err))
			return
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseFloat(l, 64)
		if err != nil || n < 1 || n > 200 {
			apiError(w, http.StatusBadRequest, "limit must be a number from 1 to 200")
			return
		}
		limit = int(n)
	}
	states := map[string]bool{}
	for _, st := range q["states"] {
		for _, one := range strings.Split(st, ",") {
			states[one] = true
		}
	}
	name, idPrefix := strings.ToLower(q.Get("name")), strings.ToLower(q.Get("id"))

	s.mu.Lock()
	var all []*sandbox
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].createdAt.After(all[j].createdAt) })
	items := []apiclient.SandboxListItem{}
	now := time.Now()
	for _, sb := range all {
		if lag := s.opts.Unkind.ListLag; lag > 0 && now.Sub(sb.createdAt) < lag {
			continue // not in the search index yet
		}
		if !matchLabels(sb.labels, labels) ||
			!strings.HasPrefix(strings.ToLower(sb.name), name) ||
			!strings.HasPrefix(strings.ToLower(sb.id), idPrefix) ||
			len(states) > 0 && !states[string(sb.state)] {
			continue
		}
		if len(items) == limit {
			break
		}
		items = append(items, sb.listItemLocked())
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, apiclient.NewListSandboxesResponse(items, *apiclient.NewNullableString(nil)))
}

func matchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// transition runs op in the background after moving the sandbox from one
// of the from states to the transitional state via; op's success leads to
// to. A sandbox already in to is answered as is; any other state is 400.
func (s *Server) transition(w http.ResponseWriter, sb *sandbox, from []apiclient.SandboxState,
	via, to apiclient.SandboxState, desired apiclient.SandboxDesiredState, what string,
	op func(ctx context.Context, from apiclient.SandboxState) error) {
	if !sb.ops.TryLock() {
		s.mu.Lock()
		st := sb.state
		s.mu.Unlock()
		apiError(w, http.StatusConflict, fmt.Sprintf("Sandbox %s is %s; try again when the operation in progress is done", sb.id, st))
		return
	}
	s.mu.Lock()
	cur := sb.state
	if cur == to {
		s.mu.Unlock()
		sb.ops.Unlock()
		s.reply(w, sb)
		return
	}
	allowed := false
	for _, f := range from {
		allowed = allowed || cur == f
	}
	if !allowed {
		s.mu.Unlock()
		sb.ops.Unlock()
		apiError(w, http.StatusBadRequest, fmt.Sprintf("Sandbox %s is %s and cannot %s", sb.id, cur, what))
		return
	}
	sb.state, sb.desired, sb.errorReason, sb.recoverable, sb.updatedAt = via, desired, "", false, time.Now()
	d := sb.dtoLocked()
	s.mu.Unlock()
	go func() {
		defer sb.ops.Unlock()
		s.delay(s.ctx, where("transition", sb.ident()))
		if err := op(s.ctx, cur); err != nil {
			sb.setState(apiclient.SANDBOXSTATE_ERROR, fmt.Sprintf("%s: %v", what, err))
			return
		}
		if to != "" {
			sb.setState(to, "")
		}
	}()
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	via := apiclient.SANDBOXSTATE_STARTING
	if sb.state == apiclient.SANDBOXSTATE_ARCHIVED {
		via = apiclient.SANDBOXSTATE_RESTORING
	}
	s.mu.Unlock()
	s.transition(w, sb, []apiclient.SandboxState{apiclient.SANDBOXSTATE_STOPPED, apiclient.SANDBOXSTATE_ARCHIVED},
		via, apiclient.SANDBOXSTATE_STARTED, apiclient.SANDBOXDESIREDSTATE_STARTED, "start",
		func(ctx context.Context, from apiclient.SandboxState) error {
			if from == apiclient.SANDBOXSTATE_ARCHIVED {
				return sb.restore(ctx)
			}
			s.mu.Lock()
			id := sb.containerID
			s.mu.Unlock()
			_, err := s.docker.ContainerStart(ctx, id, client.ContainerStartOptions{})
			return err
		})
}

// restore creates the container of an archived sandbox again from its
// committed filesystem.
func (sb *sandbox) restore(ctx context.Context) error {
	sb.s.mu.Lock()
	img := sb.archiveImage
	sb.s.mu.Unlock()
	if err := sb.runContainer(ctx, img); err != nil {
		return err
	}
	// The new container runs on the image, so it cannot be removed yet:
	// removeAll takes it with the container (an older one, restored from
	// before, can go now).
	sb.s.mu.Lock()
	old := sb.restoredFrom
	sb.archiveImage, sb.restoredFrom = "", img
	sb.s.mu.Unlock()
	if old != "" && old != img {
		if _, err := sb.s.docker.ImageRemove(ctx, old, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			sb.s.log.Warn("daytonafake: remove archive image", "image", old, "err", err)
		}
	}
	return nil
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	force := r.URL.Query().Get("force") == "true"
	s.transition(w, sb, []apiclient.SandboxState{apiclient.SANDBOXSTATE_STARTED},
		apiclient.SANDBOXSTATE_STOPPING, apiclient.SANDBOXSTATE_STOPPED, apiclient.SANDBOXDESIREDSTATE_STOPPED, "stop",
		func(ctx context.Context, _ apiclient.SandboxState) error { return sb.stopContainer(ctx, force) })
}

// stopContainer stops the container: the daemon and every process in it
// die, so every PTY connection drops without a close message.
func (sb *sandbox) stopContainer(ctx context.Context, force bool) error {
	sb.s.mu.Lock()
	id := sb.containerID
	sb.s.mu.Unlock()
	timeout := 10
	if force {
		timeout = 0
	}
	// The daemon goes down with the container: its connections drop
	// before the processes it ran get their signal.
	sb.closePTYs(true)
	_, err := sb.s.docker.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout})
	return err
}

func (s *Server) archiveSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.transition(w, sb, []apiclient.SandboxState{apiclient.SANDBOXSTATE_STOPPED},
		apiclient.SANDBOXSTATE_ARCHIVING, apiclient.SANDBOXSTATE_ARCHIVED, apiclient.SANDBOXDESIREDSTATE_ARCHIVED, "archive",
		func(ctx context.Context, _ apiclient.SandboxState) error { return sb.archive(ctx) })
}

// archive commits the stopped container's filesystem to an image and
// removes the container. The container is stopped (archive is refused
// otherwise, and Disrupt stops it first), so the commit's pause, Docker's
// default, has no process to freeze.
func (sb *sandbox) archive(ctx context.Context) error {
	s := sb.s
	s.mu.Lock()
	id := sb.containerID
	s.mu.Unlock()
	ref := "daytonafake-archive/" + sb.id + ":latest"
	_, err := s.docker.ContainerCommit(ctx, id, client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "daytonafake archive of sandbox " + sb.id,
		Changes: []string{
			"LABEL " + labelFake + "=1",
			"LABEL " + labelOwnerPID + "=" + strconv.Itoa(processID),
			"LABEL " + labelSandbox + "=" + sb.id,
		},
	})
	if err != nil {
		return fmt.Errorf("commit container: %w", err)
	}
	s.mu.Lock()
	sb.archiveImage = ref
	s.mu.Unlock()
	if _, err := s.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container: %w", err)
	}
	s.mu.Lock()
	sb.containerID = ""
	s.mu.Unlock()
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var all []apiclient.SandboxState
	for _, st := range apiclient.AllowedSandboxStateEnumValues {
		if st != apiclient.SANDBOXSTATE_DESTROYING && st != apiclient.SANDBOXSTATE_DESTROYED {
			all = append(all, st)
		}
	}
	s.transition(w, sb, all, apiclient.SANDBOXSTATE_DESTROYING, "", apiclient.SANDBOXDESIREDSTATE_DESTROYED, "delete",
		func(ctx context.Context, _ apiclient.SandboxState) error {
			sb.closePTYs(true)
			if err := sb.removeAll(ctx); err != nil {
				return err
			}
			s.sweepSnapshotImages(ctx) // a removed snapshot's image this sandbox ran on
			s.mu.Lock()
			delete(s.sandboxes, sb.id)
			sb.state = apiclient.SANDBOXSTATE_DESTROYED
			s.mu.Unlock()
			return nil
		})
}

// removeAll removes the sandbox's container and archive image.
func (sb *sandbox) removeAll(ctx context.Context) error {
	s := sb.s
	s.mu.Lock()
	id, img, restored := sb.containerID, sb.archiveImage, sb.restoredFrom
	sb.containerID, sb.archiveImage, sb.restoredFrom = "", "", ""
	s.mu.Unlock()
	var errs []error
	if id != "" {
		if _, err := s.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("daytonafake: remove container of %s: %w", sb.id, err))
		}
	}
	for _, img := range []string{img, restored} {
		if img == "" {
			continue
		}
		if _, err := s.docker.ImageRemove(ctx, img, client.ImageRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("daytonafake: remove archive image of %s: %w", sb.id, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) replaceLabels(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var req apiclient.SandboxLabels
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	s.mu.Lock()
	sb.labels = cloneMap(req.Labels)
	sb.updatedAt = time.Now()
	out := apiclient.NewSandboxLabels(cloneMap(sb.labels))
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) setAutostop(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	n, err := strconv.ParseFloat(r.PathValue("interval"), 64)
	if err != nil || n < 0 {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("interval %q must be a number of minutes >= 0", r.PathValue("interval")))
		return
	}
	s.mu.Lock()
	sb.autoStop = int(n)
	s.mu.Unlock()
	s.reply(w, sb)
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if sb := s.lookup(w, r); sb != nil {
		writeJSON(w, http.StatusOK, apiclient.NewToolboxProxyUrl(s.ToolboxProxyURL()))
	}
}

// autoStop stops started sandboxes whose auto-stop interval has passed
// without toolbox activity, as Daytona does.
func (s *Server) autoStop(now time.Time) {
	s.mu.Lock()
	var due []*sandbox
	for _, sb := range s.sandboxes {
		if sb.state == apiclient.SANDBOXSTATE_STARTED && sb.autoStop > 0 &&
			now.Sub(sb.lastActivity) > time.Duration(sb.autoStop)*time.Minute {
			due = append(due, sb)
		}
	}
	s.mu.Unlock()
	for _, sb := range due {
		if !sb.ops.TryLock() {
			continue
		}
		sb.setState(apiclient.SANDBOXSTATE_STOPPING, "")
		go func() {
			defer sb.ops.Unlock()
			if err := sb.stopContainer(s.ctx, false); err != nil {
				sb.setState(apiclient.SANDBOXSTATE_ERROR, "auto-stop: "+err.Error())
				return
			}
			sb.setState(apiclient.SANDBOXSTATE_STOPPED, "")
		}()
	}
}

// touch records toolbox activity (it defers auto-stop).
func (sb *sandbox) touch() {
	sb.s.mu.Lock()
	sb.lastActivity = time.Now()
	sb.s.mu.Unlock()
}
