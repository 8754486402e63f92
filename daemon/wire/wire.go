// Package wire is the protocol between berth's daemon and its callers, and
// the caller's side of it: the frames, the daemon's paths in a berth home,
// and a client that dials (starting the daemon when none answers) and
// relays one request at a time.
//
// It is kept light on purpose (the standard library and x/sys only): the
// berth front binary links it to answer a warm `berth exec` in a few
// milliseconds, without the backends, the approval rules or the
// configuration loader. The daemon itself is package daemon.
//
// The protocol is newline-delimited JSON frames over a unix socket, one
// request at a time per connection (see Request and Frame). Every
// connection opens with the daemon's hello frame (or its refusal), and a
// daemon serves only callers of its own build: the socket is named after
// the build (PathsFor, Identity).
//
// Trust runs both ways. The daemon serves only its own user in its own
// namespaces (a sandboxed caller is refused, and runs in one process
// inside its sandbox instead). The caller talks only to a daemon in a home
// that is its own and nobody else may write (CheckHome), served by its
// own uid (checked with SO_PEERCRED before anything is sent), and sends it
// only what configuration loading reads (CallerEnv): the daemon asks for
// any other variable it reads (a getenv frame) while the call runs.
package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// ProtocolVersion is the version of the frames below; it is part of the
// socket's name, so builds of different versions never meet. A daemon
// still refuses a request of another version (a client that named the
// socket by hand), answering status and stop only.
//
// 2: Quick requests, and the exit status in the reply (a daemon of
// version 1 would run a Quick request it should hand back, and leave the
// front's exit status at 0).
//
// 3: the hello frame, Reply.Code, Inputs.Names and the getenv/env frames
// (the caller no longer sends its whole environment).
//
// 4: the fork, checkpoint, restore, checkpoints and rm-checkpoint
// operations (Request.Target, Name and Backend), and progress frames.
const ProtocolVersion = 4

// The operations of a Request.
const (
	OpRun    = "run"    // a foreground command: out frames, then a result
	OpMeta   = "meta"   // a ":verb ..." process-tool line of berth shell
	OpEnv    = "env"    // create the environment if needed; reply with its cwd
	OpStatus = "status" // the daemon's status
	OpStop   = "stop"   // shut down; the reply comes once everything is closed

	// Fork, checkpoint and restore (docs/fork.md): progress frames while
	// files are copied, then a result whose Result is the manager's
	// answer (manager.ForkResult, CheckpointInfo, RestoreResult, a list
	// of CheckpointInfo, or {} for a removal).
	OpFork             = "fork"          // Key into Target
	OpCheckpoint       = "checkpoint"    // Key's checkpoint Name
	OpRestore          = "restore"       // Key from its checkpoint Name
	OpCheckpoints      = "checkpoints"   // the checkpoints of Key ("" all), of Backend ("" all)
	OpRemoveCheckpoint = "rm-checkpoint" // Key's checkpoint Name, of Backend ("" the configured one)
)

// The kinds of a Frame.
const (
	FrameHello     = "hello"     // daemon → client, first on every connection: Hello
	FrameRequest   = "request"   // client → daemon: Req
	FrameInterrupt = "interrupt" // client → daemon: stop the running command (Ctrl-C)
	FrameAnswer    = "answer"    // client → daemon: Answer (or Err) to an ask
	FrameEnv       = "env"       // client → daemon: Env, the values of a getenv's Names it has
	FrameOut       = "out"       // daemon → client: Data, processed output as it comes
	FrameAsk       = "ask"       // daemon → client: Question for the human
	FrameGetenv    = "getenv"    // daemon → client: Names, variables the call reads that were not sent
	FrameResult    = "result"    // daemon → client: the request's answer (or the connection's refusal)
	FrameProgress  = "progress"  // daemon → client: Progress of a long step (a copy), for a person watching
)

// Inputs are what a caller's configuration is made of: the daemon loads
// the configuration from them as the caller would have (config.Load), so
// flags, TERMINAL_* variables and the config file of each call apply.
type Inputs struct {
	// ConfigPath is the --config flag, absolute; "" when not given.
	ConfigPath string `json:"config_path,omitempty"`
	// Flags are config.LoadOptions.Flags (e.g. {"backend": "docker"}).
	Flags map[string]string `json:"flags,omitempty"`
	// Env is the part of the caller's environment that configuration
	// loading reads (CallerEnv), KEY=VALUE.
	Env []string `json:"env"`
	// Names are the names of every other variable the caller has, without
	// their values: the daemon asks for the value of one it reads (a
	// getenv frame: a backend's credentials, env_passthrough and
	// docker_forward_env names) while the call runs.
	Names []string `json:"names,omitempty"`
	// Cwd is the caller's working directory: where a local environment
	// created by this call starts when terminal.cwd is unset.
	Cwd string `json:"cwd"`
}

// Request is one operation.
type Request struct {
	Version int    `json:"version"`
	Op      string `json:"op"`
	// Inputs and Key select the environment (run, meta, env).
	Inputs Inputs `json:"inputs"`
	Key    string `json:"key,omitempty"`
	// Command is the foreground command of a run.
	Command string `json:"command,omitempty"`
	Timeout int    `json:"timeout,omitempty"`
	Workdir string `json:"workdir,omitempty"`
	// OnTimeout is the caller's terminal.on_timeout: per call, like
	// Timeout, not part of what makes an environment.
	OnTimeout string `json:"on_timeout,omitempty"`
	// Line is the ":verb ..." line of a meta request.
	Line string `json:"line,omitempty"`
	// Stream asks for out frames while a command runs.
	Stream bool `json:"stream,omitempty"`
	// CanAsk says the caller answers approval questions (a terminal).
	CanAsk bool `json:"can_ask,omitempty"`
	// Target is the key of the environment a fork makes; Name a
	// checkpoint's name; Backend the backend whose checkpoints are listed
	// or removed ("" for every one, or the configured one).
	Target  string `json:"target,omitempty"`
	Name    string `json:"name,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Quick says the caller has not read the configuration (the berth
	// front binary): the daemon loads it from Inputs, and answers with
	// Reply.Fallback, running nothing, when the configuration cannot be
	// loaded or says not to use the daemon, or the request is one the
	// caller should refuse itself (a bad timeout). Its warnings come back
	// in Reply.Warnings.
	Quick bool `json:"quick,omitempty"`
}

// Reply is the payload of a result frame. Which fields each operation
// sets:
//
//	op          Result                   Tail Notes Cwd Backend Status Exit ExitMessage Fallback Warnings
//	run         terminal.Result          yes  yes   yes yes     -      yes  yes         Quick    Quick
//	meta        the process tool's reply -    yes   -   yes     -      -    -           -        -
//	env         -                        -    yes   yes yes     -      -    -           -        -
//	status      -                        -    -     -   -       yes    -    -           -        -
//	stop        -                        -    -     -   -       -      -    -           -        -
//	fork        manager.ForkResult       -    yes   yes yes     -      -    -           -        -
//	checkpoint  manager.CheckpointInfo   -    -     -   yes     -      -    -           -        -
//	restore     manager.RestoreResult    -    yes   yes yes     -      -    -           -        -
//	checkpoints []manager.CheckpointInfo -    yes   -   -       -      -    -           -        -
//	rm-checkpoint {}                     -    -     -   yes     -      -    -           -        -
//
// Error (with Code) replaces all of them when the request could not be
// served, and is the whole reply of a refused connection.
type Reply struct {
	// Error is set when the request could not be served at all (bad
	// configuration, daemon shutting down); the other fields are then
	// empty. Code says what kind of failure it is, for callers that act
	// on it.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
	// Result is the run's terminal.Result, or the meta line's answer, as
	// JSON.
	Result json.RawMessage `json:"result,omitempty"`
	// Tail is what a caller that printed the streamed output prints after
	// it to show what Result.Output shows: the interrupt or timeout marker.
	Tail string `json:"tail,omitempty"`
	// Notes are messages for the caller's stderr (the environment was
	// recreated because the configuration changed).
	Notes []string `json:"notes,omitempty"`
	// Cwd and Backend describe the environment after the request.
	Cwd     string `json:"cwd,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Status answers a status request.
	Status *Status `json:"status,omitempty"`
	// Exit is berth exec's exit status for a run, and ExitMessage what
	// it prints on stderr after "berth: " (unless it prints the result as
	// JSON): why the command did not run or berth failed.
	Exit        int    `json:"exit,omitempty"`
	ExitMessage string `json:"exit_message,omitempty"`
	// Fallback answers a Quick request the caller must serve itself;
	// nothing ran.
	Fallback bool `json:"fallback,omitempty"`
	// Warnings are the configuration's warnings (Quick requests).
	Warnings []string `json:"warnings,omitempty"`
}

// The codes of a Reply with Error.
const (
	// CodeOtherUser: the connection is refused: the caller runs as
	// another user than the daemon.
	CodeOtherUser = "other_user"
	// CodeSandboxed: the connection is refused: the caller runs in other
	// namespaces or under another seccomp filter than the daemon (a
	// sandbox, or a daemon started in one). Nothing ran; the caller runs
	// the call in one process, inside its own sandbox.
	CodeSandboxed = "sandboxed"
	// CodeVersion: the request is of another protocol version.
	CodeVersion = "version"
	// CodeNotMeta: a meta request whose line is not a ":verb ..."
	// process-tool line; the caller runs it as a command.
	CodeNotMeta = "not_meta"
	// CodeConfig: the caller's configuration cannot be loaded or is not
	// to be trusted.
	CodeConfig = "config"
	// CodeShuttingDown: the daemon is stopping; try again.
	CodeShuttingDown = "shutting_down"
	// CodeFailed: any other failure.
	CodeFailed = "failed"
)

// Hello opens every connection the daemon accepts.
type Hello struct {
	Protocol int    `json:"protocol"`
	Identity string `json:"identity"` // the daemon's socket name part (Identity)
	PID      int    `json:"pid"`
}

// Frame is one message on the socket.
type Frame struct {
	T     string   `json:"t"`
	Hello *Hello   `json:"hello,omitempty"`
	Req   *Request `json:"req,omitempty"`
	// Names are the variables a getenv asks for; Env the values the
	// caller has of them (env), KEY=VALUE.
	Names []string `json:"names,omitempty"`
	Env   []string `json:"env,omitempty"`
	// Data is a chunk of output (out).
	Data []byte `json:"d,omitempty"`
	// Question is an approval.Question as JSON (ask); Answer an
	// approval.Answer (answer), or Err why there is none.
	Question json.RawMessage `json:"q,omitempty"`
	Answer   string          `json:"a,omitempty"`
	Err      string          `json:"err,omitempty"`
	Reply    *Reply          `json:"reply,omitempty"`
	// Progress is how far a long step got (progress).
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is a backend.Event on the wire: how far a long step (a copy of
// an environment's files) has got.
type Progress struct {
	Step    string        `json:"step"`
	Done    int64         `json:"done,omitempty"`
	Total   int64         `json:"total,omitempty"`
	Unit    string        `json:"unit,omitempty"`
	End     bool          `json:"end,omitempty"`
	Err     string        `json:"err,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns,omitempty"`
}

// Status describes a running daemon.
type Status struct {
	PID int `json:"pid"`
	// Identity names the daemon's build (its socket is berth-<identity>.sock);
	// empty from daemons before protocol 3.
	Identity     string        `json:"identity,omitempty"`
	Socket       string        `json:"socket"`
	Home         string        `json:"home"`
	Started      time.Time     `json:"started"`
	Uptime       time.Duration `json:"uptime_ns"`
	Lifetime     time.Duration `json:"lifetime_ns"`
	Connections  int           `json:"connections"`
	Environments []EnvStatus   `json:"environments"`
}

// EnvStatus describes one environment the daemon holds.
type EnvStatus struct {
	Key       string    `json:"key"`
	Backend   string    `json:"backend"`
	Cwd       string    `json:"cwd,omitempty"`
	Created   time.Time `json:"created"`
	LastUsed  time.Time `json:"last_used"`
	Busy      bool      `json:"busy"`
	Processes int       `json:"background_processes"`
}

// Paths are the files of the daemon of one build in a berth home.
type Paths struct {
	Identity string // the build (Identity); "" for a daemon from before protocol 3
	Dir      string // $BERTH_HOME/daemon, mode 0700
	Socket   string // the unix socket, mode 0600: berth-<identity>.sock
	PID      string // the daemon's pid; flock-ed by the daemon while it lives
	Lock     string // flock-ed by a client while it starts a daemon
	Log      string // the stdout and stderr of every daemon of the home
}

// maxSocketPath is the longest path a unix socket address holds on Linux
// (sun_path is 108 bytes with its NUL).
const maxSocketPath = 107

// ErrPathTooLong says the socket path does not fit in a unix socket
// address; callers fall back to running in one process.
var ErrPathTooLong = errors.New("daemon: socket path too long for a unix socket")

// PathsFor returns the files of this executable's daemon (SelfIdentity)
// in the berth home.
func PathsFor(home string) (Paths, error) { return PathsOf(home, SelfIdentity()) }

// PathsOf returns the files of the daemon of build identity in the berth
// home; identity "" names the files of a daemon from before protocol 3.
func PathsOf(home, identity string) (Paths, error) {
	dir := filepath.Join(home, "daemon")
	name := "berth"
	if identity != "" {
		name += "-" + identity
	}
	p := Paths{
		Identity: identity,
		Dir:      dir,
		Socket:   filepath.Join(dir, name+".sock"),
		PID:      filepath.Join(dir, name+".pid"),
		Lock:     filepath.Join(dir, "start-"+identity+".lock"),
		Log:      filepath.Join(dir, "berth.log"),
	}
	if identity == "" {
		p.Lock = filepath.Join(dir, "start.lock")
	}
	if len(p.Socket) > maxSocketPath {
		return p, fmt.Errorf("%w: %s is %d bytes, at most %d fit (choose a shorter BERTH_HOME)", ErrPathTooLong, p.Socket, len(p.Socket), maxSocketPath)
	}
	return p, nil
}

// Daemons returns the files of every daemon socket in the home, of any
// build, this executable's first: what berth daemon status and stop act
// on.
func Daemons(home string) ([]Paths, error) {
	socks, err := filepath.Glob(filepath.Join(home, "daemon", "berth*.sock"))
	if err != nil {
		return nil, err
	}
	self := SelfIdentity()
	var out []Paths
	for _, s := range socks {
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s), "berth"), ".sock")
		if id != "" && !strings.HasPrefix(id, "-") {
			continue
		}
		p, err := PathsOf(home, strings.TrimPrefix(id, "-"))
		if err != nil {
			continue
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Identity == self && out[j].Identity != self })
	return out, nil
}

// maxFrame bounds one frame (a command, an environment, an output chunk).
const maxFrame = 64 << 20

// Conn frames one socket: writes are serialised, reads come from one
// goroutine at a time.
type Conn struct {
	rw  io.ReadWriteCloser
	r   *bufio.Reader
	wmu sync.Mutex
}

// NewConn frames rw.
func NewConn(rw io.ReadWriteCloser) *Conn {
	return &Conn{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)}
}

// MarshalJSON encodes v as berth prints results and sends frames: without
// escaping <, > and & (commands are full of them), with no trailing
// newline. It is the one JSON encoder of results: the daemon's replies,
// berth exec --json and berth shell --json.
func MarshalJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Send writes one frame.
func (c *Conn) Send(f Frame) error {
	b, err := MarshalJSON(f)
	if err != nil {
		return fmt.Errorf("daemon: encode %s frame: %w", f.T, err)
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.rw.Write(b); err != nil {
		return fmt.Errorf("daemon: send %s frame: %w", f.T, err)
	}
	return nil
}

// Recv reads one frame.
func (c *Conn) Recv() (Frame, error) {
	var line []byte
	for {
		chunk, isPrefix, err := c.r.ReadLine()
		if err != nil {
			return Frame{}, err
		}
		line = append(line, chunk...)
		if len(line) > maxFrame {
			return Frame{}, fmt.Errorf("daemon: frame larger than %d bytes", maxFrame)
		}
		if !isPrefix {
			break
		}
	}
	var f Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return Frame{}, fmt.Errorf("daemon: bad frame: %w", err)
	}
	return f, nil
}
