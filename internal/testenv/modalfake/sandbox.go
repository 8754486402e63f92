package modalfake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// maxTimeout is Modal's longest sandbox lifetime (and idle timeout).
const maxTimeout = 24 * time.Hour

// defaultEntrypoint is what a sandbox runs when its definition gives no
// command: Modal's sandboxes then sleep until their timeout.
var defaultEntrypoint = []string{"sleep", "infinity"}

// sandbox is one sandbox: a container and what runs in it.
type sandbox struct {
	s           *Server
	ord         int // 1 for the first sandbox the server created, 2 for the next...
	id          string
	taskID      string
	appID       string
	env         string
	name        string
	imageID     string
	image       image // what imageID was when the sandbox was created
	def         *pb.Sandbox
	created     time.Time // when SandboxCreate arrived: the lifetime counts from here
	containerID string
	pid         int // the container's init process, on the host
	secretEnv   []string
	timeout     time.Duration
	idleTimeout time.Duration

	mu         sync.Mutex
	res        *pb.GenericResult // nil while running
	finishedAt time.Time
	done       chan struct{} // closed when res is set
	removed    chan struct{} // closed once the container is gone
	tags       map[string]string
	execs      map[string]*execProc // by the client's exec id
	files      map[string]*os.File  // by file descriptor id
	running    int                  // execs started and not exited
	nExecs     int                  // execs started so far (their numbers)
	lastActive time.Time
	poke       chan struct{} // wakes the idle watcher
	// scheduledAt: until then the sandbox has no task id
	// (Faults.SchedulingDelay), counted from when SandboxCreate answered.
	scheduledAt time.Time
}

// ident names the sandbox in the identity of its fault streams: by its
// number, which (unlike its random id) is the same in every run that
// creates sandboxes in the same order.
func (sb *sandbox) ident() string { return "sandbox " + strconv.Itoa(sb.ord) }

func (sb *sandbox) finished() *pb.GenericResult {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.res
}

func (sb *sandbox) info() SandboxInfo {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	tags := make(map[string]string, len(sb.tags))
	for k, v := range sb.tags {
		tags[k] = v
	}
	var res *pb.GenericResult
	if sb.res != nil {
		res = proto.Clone(sb.res).(*pb.GenericResult)
	}
	return SandboxInfo{
		ID: sb.id, TaskID: sb.taskID, ContainerID: sb.containerID, Name: sb.name,
		AppID: sb.appID, Tags: tags, Running: sb.res == nil, Result: res,
	}
}

// scheduled reports whether the sandbox has left scheduling (its task id
// is known to clients).
func (sb *sandbox) scheduled() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return !time.Now().Before(sb.scheduledAt)
}

// touch records activity (an exec starting or ending, stdin written) for
// the idle timeout.
func (sb *sandbox) touch() {
	sb.mu.Lock()
	sb.lastActive = time.Now()
	sb.mu.Unlock()
	select {
	case sb.poke <- struct{}{}:
	default:
	}
}

func (sb *sandbox) awaitRemoved(ctx context.Context) {
	select {
	case <-sb.removed:
	case <-ctx.Done():
	}
}

func (s *Server) sandboxByID(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Sandbox with id: '%s' not found", id)
	}
	return sb, nil
}

func (s *Server) sandboxByTask(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Task '%s' not found", id)
	}
	return sb, nil
}

var appNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,64}$`)

// AppGetOrCreate looks an app up by name in an environment, creating it
// when asked to.
func (c *control) AppGetOrCreate(ctx context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	s := c.s
	env, err := s.environment(req.GetEnvironmentName())
	if err != nil {
		return nil, err
	}
	name := req.GetAppName()
	if !appNameRE.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid App name %q: use at most 64 letters, digits, '.', '-' or '_'", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := env + "/" + name
	if id, ok := s.apps[key]; ok {
		if req.GetObjectCreationType() == pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS {
			return nil, status.Errorf(codes.AlreadyExists, "App '%s' already exists", name)
		}
		return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
	}
	switch req.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING, pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS:
	default:
		return nil, status.Errorf(codes.NotFound, "App '%s' not found in environment '%s'", name, env)
	}
	id := modalID("ap")
	s.apps[key] = id
	s.appEnv[id] = env
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

// SecretGetOrCreate creates ephemeral secrets from a map (what the SDK does
// for Env parameters). The fake holds no named secrets: looking one up is
// NotFound.
func (c *control) SecretGetOrCreate(ctx context.Context, req *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	s := c.s
	if _, err := s.environment(req.GetEnvironmentName()); err != nil {
		return nil, err
	}
	if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL {
		return nil, status.Errorf(codes.NotFound, "Secret '%s' not found", req.GetDeploymentName())
	}
	env := make(map[string]string, len(req.GetEnvDict()))
	for k, v := range req.GetEnvDict() {
		env[k] = v
	}
	id := modalID("st")
	s.mu.Lock()
	s.secrets[id] = env
	s.mu.Unlock()
	return pb.SecretGetOrCreateResponse_builder{SecretId: id}.Build(), nil
}

// resolveSecrets returns the variables of the secrets ids name, sorted.
func (s *Server) resolveSecrets(ids []string) (map[string]string, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	env := map[string]string{}
	for _, id := range ids {
		sec, ok := s.secrets[id]
		if !ok {
			return nil, nil, status.Errorf(codes.NotFound, "Secret '%s' not found", id)
		}
		for k, v := range sec {
			env[k] = v
		}
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return env, list, nil
}

// SandboxCreate validates a definition, records it and starts its container.
func (c *control) SandboxCreate(ctx context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	s := c.s
	def := req.GetDefinition()
	rec := Record{AppID: req.GetAppId(), Definition: proto.Clone(def).(*pb.Sandbox)}
	sb, err := s.createSandbox(ctx, req.GetAppId(), def, &rec)
	if err != nil {
		rec.Err = err
	}
	s.mu.Lock()
	s.records = append(s.records, rec)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return pb.SandboxCreateResponse_builder{SandboxId: sb.id}.Build(), nil
}

func (s *Server) createSandbox(ctx context.Context, appID string, def *pb.Sandbox, rec *Record) (*sandbox, error) {
	arrived := time.Now()
	if def == nil {
		return nil, status.Error(codes.InvalidArgument, "missing sandbox definition")
	}
	s.mu.Lock()
	env, ok := s.appEnv[appID]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", appID)
	}
	rec.Environment = env
	if err := unsupported(def); err != nil {
		return nil, err
	}
	timeout := time.Duration(def.GetTimeoutSecs()) * time.Second
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	if timeout > maxTimeout {
		return nil, status.Errorf(codes.InvalidArgument, "timeout of %v exceeds the maximum of 24h", timeout)
	}
	var idle time.Duration
	if def.HasIdleTimeoutSecs() {
		idle = time.Duration(def.GetIdleTimeoutSecs()) * time.Second
		if idle > maxTimeout {
			return nil, status.Errorf(codes.InvalidArgument, "idle timeout of %v exceeds the maximum of 24h", idle)
		}
	}
	if def.HasWorkdir() && !strings.HasPrefix(def.GetWorkdir(), "/") {
		return nil, status.Errorf(codes.InvalidArgument, "workdir %q must be an absolute path", def.GetWorkdir())
	}
	img, err := s.imageByID(ctx, def.GetImageId())
	if err != nil {
		return nil, err
	}
	secretEnv, envList, err := s.resolveSecrets(def.GetSecretIds())
	if err != nil {
		return nil, err
	}
	rec.SecretEnv = secretEnv

	sb := &sandbox{
		s:           s,
		id:          modalID("sb"),
		taskID:      modalID("ta"),
		appID:       appID,
		env:         env,
		name:        def.GetName(),
		imageID:     img.id,
		image:       *img,
		def:         proto.Clone(def).(*pb.Sandbox),
		created:     arrived,
		scheduledAt: arrived.Add(maxTimeout), // set when SandboxCreate answers
		secretEnv:   envList,
		timeout:     timeout,
		idleTimeout: idle,
		done:        make(chan struct{}),
		removed:     make(chan struct{}),
		tags:        map[string]string{},
		execs:       map[string]*execProc{},
		files:       map[string]*os.File{},
		lastActive:  time.Now(),
		poke:        make(chan struct{}, 1),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "server shutting down")
	}
	if sb.name != "" {
		for _, o := range s.sandboxes {
			if o.appID == appID && o.name == sb.name && o.finished() == nil {
				s.mu.Unlock()
				return nil, status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists in the App", sb.name)
			}
		}
	}
	s.nSandboxes++
	sb.ord = s.nSandboxes
	s.sandboxes[sb.id] = sb
	s.tasks[sb.taskID] = sb
	s.mu.Unlock()
	rec.SandboxID = sb.id

	err = s.startContainer(ctx, sb, img)
	sb.mu.Lock()
	sb.scheduledAt = time.Now().Add(s.draw("scheduling delay "+sb.ident(), s.current().SchedulingDelay))
	sb.mu.Unlock()
	if err != nil {
		s.log.Warn("modalfake: sandbox failed to start", "sandbox", sb.id, "err", err)
		s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_INIT_FAILURE, 0, err.Error()))
		return sb, nil
	}
	s.log.Info("modalfake: sandbox started", "sandbox", sb.id, "container", sb.containerID[:12], "image", img.ref)
	return sb, nil
}

// unsupported rejects what the fake cannot do for real, rather than
// silently ignoring it.
func unsupported(def *pb.Sandbox) error {
	why := ""
	switch {
	case len(def.GetVolumeMounts()) > 0, len(def.GetNfsMounts()) > 0:
		why = "volumes"
	case len(def.GetCloudBucketMounts()) > 0, len(def.GetS3Mounts()) > 0:
		why = "cloud bucket mounts"
	case len(def.GetOpenPorts().GetPorts()) > 0:
		why = "tunnels"
	case def.GetPtyInfo().GetEnabled():
		why = "a PTY on the sandbox's entrypoint"
	case def.HasProxyId():
		why = "proxies"
	case def.GetResources().GetGpuConfig().GetCount() > 0 || def.GetResources().GetGpuConfig().GetGpuType() != "":
		why = "GPUs"
	case def.GetNetworkAccess().GetNetworkAccessType() == pb.NetworkAccess_ALLOWLIST:
		why = "CIDR allowlists"
	case len(def.GetMountIds()) > 0:
		why = "mounts"
	}
	if why != "" {
		return status.Errorf(codes.InvalidArgument, "modalfake: %s are not supported by the fake Modal", why)
	}
	return nil
}

// startContainer creates and starts the sandbox's container and arms its
// timeouts.
func (s *Server) startContainer(ctx context.Context, sb *sandbox, img *image) error {
	def := sb.def
	argv := def.GetEntrypointArgs()
	if len(argv) == 0 {
		argv = defaultEntrypoint
	}
	init := true
	hc := &container.HostConfig{Init: &init}
	if def.GetBlockNetwork() || def.GetNetworkAccess().GetNetworkAccessType() == pb.NetworkAccess_BLOCKED {
		hc.NetworkMode = "none"
	}
	if r := def.GetResources(); r != nil {
		if r.GetMemoryMbMax() > 0 {
			hc.Memory = int64(r.GetMemoryMbMax()) << 20
		}
		if r.GetMilliCpuMax() > 0 {
			hc.NanoCPUs = int64(r.GetMilliCpuMax()) * 1_000_000
		}
	}
	cfg := &container.Config{
		Image:      img.ref,
		Entrypoint: argv,
		Cmd:        nil,
		Env:        sb.secretEnv,
		WorkingDir: def.GetWorkdir(),
		Labels: map[string]string{
			LabelInstance: s.instance,
			LabelOwner:    s.owner,
			LabelSandbox:  sb.id,
		},
	}
	cr, err := s.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     cfg,
		HostConfig: hc,
		Name:       "modalfake-" + strings.ToLower(sb.id) + "-" + randomID(3),
	})
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	sb.mu.Lock()
	sb.containerID = cr.ID
	sb.mu.Unlock()
	if _, err := s.docker.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	ins, err := s.docker.ContainerInspect(ctx, cr.ID, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect container: %w", err)
	}
	if st := ins.Container.State; st != nil {
		sb.pid = st.Pid
	}
	// The idle clock starts when the sandbox is up.
	sb.mu.Lock()
	sb.lastActive = time.Now()
	sb.mu.Unlock()
	s.wg.Add(2)
	go s.watchContainer(sb)
	go s.watchTimeouts(sb)
	return nil
}

// watchContainer finishes the sandbox when its entrypoint exits (or the
// container is killed from outside).
func (s *Server) watchContainer(sb *sandbox) {
	defer s.wg.Done()
	w := s.docker.ContainerWait(s.ctx, sb.containerID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		code := int32(r.StatusCode)
		st := pb.GenericResult_GENERIC_STATUS_SUCCESS
		msg := ""
		if code != 0 {
			st = pb.GenericResult_GENERIC_STATUS_FAILURE
			msg = fmt.Sprintf("entrypoint exited with status %d", code)
		}
		s.finish(sb, result(st, code, msg))
	case err := <-w.Error:
		if s.ctx.Err() == nil && sb.finished() == nil {
			s.log.Warn("modalfake: lost track of a sandbox's container", "sandbox", sb.id, "err", err)
			s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_INTERNAL_FAILURE, 0, "container lost: "+err.Error()))
		}
	case <-sb.done:
	}
}

// watchTimeouts enforces the sandbox's timeout and idle timeout. The
// timeout is a hard lifetime counted from when SandboxCreate arrived, ended
// however busy the sandbox is, and up to Faults.ExpiryEarly sooner.
func (s *Server) watchTimeouts(sb *sandbox) {
	defer s.wg.Done()
	early := s.draw("early expiry "+sb.ident(), s.current().ExpiryEarly)
	deadline := time.NewTimer(time.Until(sb.created.Add(sb.timeout - early)))
	defer deadline.Stop()
	var idle <-chan time.Time
	var idleTimer *time.Timer
	arm := func() {
		if sb.idleTimeout <= 0 {
			return
		}
		sb.mu.Lock()
		busy, last := sb.running > 0, sb.lastActive
		sb.mu.Unlock()
		if idleTimer != nil {
			idleTimer.Stop()
			idle = nil
		}
		if busy {
			return
		}
		idleTimer = time.NewTimer(time.Until(last.Add(sb.idleTimeout)))
		idle = idleTimer.C
	}
	arm()
	for {
		select {
		case <-sb.done:
			return
		case <-s.ctx.Done():
			return
		case <-deadline.C:
			s.log.Info("modalfake: sandbox timed out", "sandbox", sb.id, "timeout", sb.timeout)
			s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0, fmt.Sprintf("Sandbox timed out after %v", sb.timeout)))
			return
		case <-sb.poke:
			arm()
		case <-idle:
			sb.mu.Lock()
			busy, last := sb.running > 0, sb.lastActive
			sb.mu.Unlock()
			if !busy && time.Since(last) >= sb.idleTimeout {
				s.log.Info("modalfake: sandbox idle timed out", "sandbox", sb.id, "idle_timeout", sb.idleTimeout)
				s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_IDLE_TIMEOUT, 0, fmt.Sprintf("Sandbox idle for %v", sb.idleTimeout)))
				return
			}
			arm()
		}
	}
}

// finish records the sandbox's result (the first one wins), removes its
// container and ends what ran in it. It reports whether this call finished
// the sandbox.
func (s *Server) finish(sb *sandbox, res *pb.GenericResult) bool {
	sb.mu.Lock()
	if sb.res != nil {
		sb.mu.Unlock()
		return false
	}
	sb.res = res
	sb.finishedAt = time.Now()
	close(sb.done)
	execs := make([]*execProc, 0, len(sb.execs))
	var conns []client.HijackedResponse
	for _, e := range sb.execs {
		if _, _, done := e.status(); !done {
			e.killed.Store(true)
		}
		execs = append(execs, e)
		if e.conn.Conn != nil {
			conns = append(conns, e.conn)
		}
	}
	files := sb.files
	sb.files = map[string]*os.File{}
	cid := sb.containerID
	sb.mu.Unlock()

	for _, f := range files {
		f.Close()
	}
	// The daemon waits for an exec's output to be taken before it lets the
	// container go; output nobody reads must not hold the removal up.
	for _, c := range conns {
		c.Close()
	}
	if cid != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := s.docker.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			s.log.Warn("modalfake: remove container", "sandbox", sb.id, "err", err)
		}
		cancel()
	}
	s.dropDeletedImage(sb)
	for _, e := range execs {
		e.exited(nil, ptr32(9)) // killed with the container, unless it had exited
	}
	close(sb.removed)
	s.log.Info("modalfake: sandbox finished", "sandbox", sb.id, "status", res.GetStatus().String())
	return true
}

func ptr32(v int32) *int32 { return &v }

// SandboxWait waits up to the request's timeout for the sandbox to finish;
// the result is empty while it runs.
func (c *control) SandboxWait(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := c.s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if t := req.GetTimeout(); t > 0 {
		timer := time.NewTimer(time.Duration(float64(t) * float64(time.Second)))
		defer timer.Stop()
		select {
		case <-sb.done:
		case <-timer.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return pb.SandboxWaitResponse_builder{Result: sb.finished()}.Build(), nil
}

// SandboxTerminate terminates a running sandbox; for a finished one it
// returns the result it had.
func (c *control) SandboxTerminate(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := c.s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if res := sb.finished(); res != nil {
		return pb.SandboxTerminateResponse_builder{ExistingResult: res}.Build(), nil
	}
	c.s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_TERMINATED, 0, "Sandbox terminated"))
	return pb.SandboxTerminateResponse_builder{}.Build(), nil
}

// SandboxGetTaskId returns the sandbox's task, and its result once finished.
func (c *control) SandboxGetTaskId(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := c.s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	var b pb.SandboxGetTaskIdResponse_builder
	res := sb.finished()
	if res != nil {
		b.TaskResult = res
	}
	// While it is being scheduled (Faults.SchedulingDelay) the sandbox has
	// no task id yet, and says so with an empty one.
	if res != nil || sb.scheduled() {
		b.TaskId = &sb.taskID
	}
	return b.Build(), nil
}

// SandboxTagsSet replaces the sandbox's tags.
func (c *control) SandboxTagsSet(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	if _, err := c.s.environment(req.GetEnvironmentName()); err != nil {
		return nil, err
	}
	sb, err := c.s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for _, t := range req.GetTags() {
		if t.GetTagName() == "" {
			return nil, status.Error(codes.InvalidArgument, "tag names must not be empty")
		}
		tags[t.GetTagName()] = t.GetTagValue()
	}
	sb.mu.Lock()
	sb.tags = tags
	sb.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// SandboxTagsGet returns the sandbox's tags.
func (c *control) SandboxTagsGet(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := c.s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxTagsGetResponse_builder{Tags: tagList(sb.info().Tags)}.Build(), nil
}

func tagList(tags map[string]string) []*pb.SandboxTag {
	names := make([]string, 0, len(tags))
	for k := range tags {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*pb.SandboxTag, 0, len(names))
	for _, k := range names {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: tags[k]}.Build())
	}
	return out
}

// listPage is how many sandboxes one SandboxList answer holds at most.
const listPage = 100

// SandboxList lists the sandboxes of an environment (or of one app),
// newest first, created before the request's timestamp, carrying every tag
// asked for; finished ones only when asked.
func (c *control) SandboxList(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s := c.s
	env, err := s.environment(req.GetEnvironmentName())
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for _, t := range req.GetTags() {
		want[t.GetTagName()] = t.GetTagValue()
	}
	s.mu.Lock()
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].created.After(all[j].created) })
	var out []*pb.SandboxInfo
	for _, sb := range all {
		if len(out) == listPage {
			break
		}
		created := float64(sb.created.UnixNano()) / 1e9
		if b := req.GetBeforeTimestamp(); b != 0 && created >= b {
			continue
		}
		if req.GetAppId() != "" && sb.appID != req.GetAppId() || req.GetAppId() == "" && sb.env != env {
			continue
		}
		info := sb.info()
		if info.Result != nil && !req.GetIncludeFinished() {
			continue
		}
		match := true
		for k, v := range want {
			if got, ok := info.Tags[k]; !ok || got != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		task := pb.TaskInfo_builder{SandboxId: sb.id, StartedAt: created, Result: info.Result}
		if info.Result != nil || sb.scheduled() {
			task.Id = sb.taskID
		}
		if info.Result != nil {
			sb.mu.Lock()
			task.FinishedAt = float64(sb.finishedAt.UnixNano()) / 1e9
			sb.mu.Unlock()
		}
		b := pb.SandboxInfo_builder{
			Id:          sb.id,
			CreatedAt:   created,
			TaskInfo:    task.Build(),
			AppId:       sb.appID,
			Tags:        tagList(info.Tags),
			Name:        sb.name,
			ImageId:     sb.imageID,
			TimeoutSecs: uint32(sb.timeout / time.Second),
		}
		if sb.idleTimeout > 0 {
			v := uint32(sb.idleTimeout / time.Second)
			b.IdleTimeoutSecs = &v
		}
		out = append(out, b.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

// SandboxGetFromName finds a running sandbox by its name in an app.
func (c *control) SandboxGetFromName(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	s := c.s
	env, err := s.environment(req.GetEnvironmentName())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	appID, ok := s.apps[env+"/"+req.GetAppName()]
	var found *sandbox
	if ok {
		for _, sb := range s.sandboxes {
			if sb.appID == appID && sb.name != "" && sb.name == req.GetSandboxName() && sb.finished() == nil {
				found = sb
			}
		}
	}
	s.mu.Unlock()
	if found == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox with name '%s' not found in App '%s'", req.GetSandboxName(), req.GetAppName())
	}
	return pb.SandboxGetFromNameResponse_builder{SandboxId: found.id}.Build(), nil
}

// SandboxSnapshotFs commits the running sandbox's filesystem into a new
// image that sandboxes can be created from.
func (c *control) SandboxSnapshotFs(ctx context.Context, req *pb.SandboxSnapshotFsRequest) (*pb.SandboxSnapshotFsResponse, error) {
	s := c.s
	sb, err := s.sandboxByID(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if res := sb.finished(); res != nil {
		return pb.SandboxSnapshotFsResponse_builder{
			Result: result(pb.GenericResult_GENERIC_STATUS_FAILURE, 0, "Sandbox has already finished; it cannot be snapshotted"),
		}.Build(), nil
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(float64(t)*float64(time.Second)))
		defer cancel()
	}
	if resp, err := s.beforeSnapshot(ctx, sb); resp != nil || err != nil {
		return resp, err
	}
	// A large filesystem takes a while (Faults.SnapshotDelay); the
	// sandbox may finish meanwhile.
	if d := s.draw("snapshot delay "+sb.ident(), s.current().SnapshotDelay); d > 0 {
		select {
		case <-time.After(d):
		case <-sb.done:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return pb.SandboxSnapshotFsResponse_builder{Result: result(pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0, "snapshot timed out")}.Build(), nil
			}
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if sb.finished() != nil {
			return pb.SandboxSnapshotFsResponse_builder{
				Result: result(pb.GenericResult_GENERIC_STATUS_FAILURE, 0, "Sandbox finished while it was being snapshotted"),
			}.Build(), nil
		}
	}
	id := modalID("im")
	// The image keeps the base image's configuration, not the container's:
	// the sandbox's secrets were injected at run time and must not be
	// baked into the snapshot.
	var cfg container.Config
	s.mu.Lock()
	base := s.images[sb.imageID]
	s.mu.Unlock()
	if base != nil {
		if ins, err := s.docker.ImageInspect(ctx, base.ref); err == nil && ins.Config != nil {
			cfg.Env = ins.Config.Env
			cfg.WorkingDir = ins.Config.WorkingDir
			cfg.Entrypoint = ins.Config.Entrypoint
			cfg.Cmd = ins.Config.Cmd
			cfg.User = ins.Config.User
		}
	}
	cfg.Labels = map[string]string{LabelInstance: s.instance, LabelOwner: s.owner}
	ref := "modalfake/snapshot:" + strings.ToLower(randomID(8))
	cr, err := s.commit(ctx, sb, client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "modalfake snapshot " + id + " of " + sb.id,
		Config:    &cfg,
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return pb.SandboxSnapshotFsResponse_builder{Result: result(pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0, "snapshot timed out")}.Build(), nil
		}
		return pb.SandboxSnapshotFsResponse_builder{
			Result: result(pb.GenericResult_GENERIC_STATUS_FAILURE, 0, "snapshot failed: "+err.Error()),
		}.Build(), nil
	}
	expires := s.snapshotExpiry(sb)
	s.mu.Lock()
	s.images[id] = &image{id: id, ref: cr.ID, snapshot: true, expires: expires}
	s.mu.Unlock()
	s.log.Info("modalfake: snapshot", "sandbox", sb.id, "image", id, "docker_image", cr.ID)
	return pb.SandboxSnapshotFsResponse_builder{
		ImageId: id,
		Result:  result(pb.GenericResult_GENERIC_STATUS_SUCCESS, 0, ""),
	}.Build(), nil
}

// commitAttempts is how many times a snapshot commits before it reports a
// failure.
const commitAttempts = 3

// commit commits the running sandbox's container without pausing it: a
// real Modal snapshot does not stop the sandbox, and a paused container
// froze every process in it for the whole commit, an exec started then
// included, whose start (runc init in the frozen cgroup) then hung the
// daemon's shim. A file cut shorter while Docker copies it breaks that
// commit ("Error processing tar file ... unexpected EOF"): the snapshot of
// a running filesystem is taken again, up to commitAttempts times, as
// Modal's snapshot of a running sandbox does not fail on a file being
// written.
func (s *Server) commit(ctx context.Context, sb *sandbox, opts client.ContainerCommitOptions) (client.ContainerCommitResult, error) {
	opts.NoPause = true
	for attempt := 1; ; attempt++ {
		cr, err := s.docker.ContainerCommit(ctx, sb.containerID, opts)
		if err == nil || attempt == commitAttempts || ctx.Err() != nil || sb.finished() != nil {
			return cr, err
		}
		s.log.Warn("modalfake: snapshot: the commit of a running sandbox failed; committing again", "sandbox", sb.id, "attempt", attempt, "err", err)
	}
}
