package modalfake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"

	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fsResult is the output of one filesystem operation, fetched once with
// ContainerFilesystemExecGetOutput.
type fsResult struct {
	output [][]byte
	err    *pb.SystemErrorMessage
}

// ContainerFilesystemExec runs one file operation (open, read, write,
// flush, close) in a running task's filesystem; its output is fetched with
// ContainerFilesystemExecGetOutput.
func (c *control) ContainerFilesystemExec(ctx context.Context, req *pb.ContainerFilesystemExecRequest) (*pb.ContainerFilesystemExecResponse, error) {
	s := c.s
	sb, err := s.sandboxByTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if res := sb.finished(); res != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has already finished", sb.taskID)
	}
	res := &fsResult{}
	resp := pb.ContainerFilesystemExecResponse_builder{ExecId: modalID("fe")}
	switch {
	case req.GetFileOpenRequest() != nil:
		fd, err := sb.openFile(req.GetFileOpenRequest())
		if err != nil {
			res.err = sysError(err)
		} else {
			resp.FileDescriptor = &fd
		}
	case req.GetFileReadRequest() != nil:
		r := req.GetFileReadRequest()
		f, err := sb.file(r.GetFileDescriptor())
		if err == nil {
			var data []byte
			if r.HasN() {
				data = make([]byte, r.GetN())
				var n int
				n, err = io.ReadFull(f, data)
				data = data[:n]
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					err = nil
				}
			} else {
				data, err = io.ReadAll(f)
			}
			if len(data) > 0 {
				res.output = [][]byte{data}
			}
		}
		if err != nil {
			res.err = sysError(err)
		}
	case req.GetFileWriteRequest() != nil:
		w := req.GetFileWriteRequest()
		f, err := sb.file(w.GetFileDescriptor())
		if err == nil {
			_, err = f.Write(w.GetData())
		}
		if err != nil {
			res.err = sysError(err)
		}
	case req.GetFileFlushRequest() != nil:
		// Writes go straight to the kernel: nothing is buffered here.
		if _, err := sb.file(req.GetFileFlushRequest().GetFileDescriptor()); err != nil {
			res.err = sysError(err)
		}
	case req.GetFileCloseRequest() != nil:
		fd := req.GetFileCloseRequest().GetFileDescriptor()
		f, err := sb.file(fd)
		if err == nil {
			sb.mu.Lock()
			delete(sb.files, fd)
			sb.mu.Unlock()
			err = f.Close()
		}
		if err != nil {
			res.err = sysError(err)
		}
	default:
		return nil, status.Error(codes.Unimplemented, "modalfake: only file open, read, write, flush and close are implemented")
	}
	b := resp.Build()
	s.mu.Lock()
	s.fsResults[b.GetExecId()] = res
	s.mu.Unlock()
	return b, nil
}

// ContainerFilesystemExecGetOutput streams the output of a file operation
// and its end (or its error).
func (c *control) ContainerFilesystemExecGetOutput(req *pb.ContainerFilesystemExecGetOutputRequest, stream grpc.ServerStreamingServer[pb.FilesystemRuntimeOutputBatch]) error {
	s := c.s
	s.mu.Lock()
	res, ok := s.fsResults[req.GetExecId()]
	delete(s.fsResults, req.GetExecId())
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "filesystem exec '%s' not found", req.GetExecId())
	}
	return stream.Send(pb.FilesystemRuntimeOutputBatch_builder{Output: res.output, Error: res.err, Eof: true}.Build())
}

// file returns an open file of the sandbox.
func (sb *sandbox) file(fd string) (*os.File, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	f, ok := sb.files[fd]
	if !ok {
		return nil, &os.PathError{Op: "use", Path: fd, Err: fmt.Errorf("%w: no open file with this descriptor", syscall.EINVAL)}
	}
	return f, nil
}

// openFile opens a path inside the sandbox's container, with a mode as
// Python's open() takes it ("r", "w", "a", "x", optionally with "+" and
// "b"), and returns the new descriptor's id.
//
// The file is opened from the host through the container's root
// (/proc/PID/root) with RESOLVE_IN_ROOT, so absolute links and ".." resolve
// inside the container, never on the host.
func (sb *sandbox) openFile(req *pb.ContainerFileOpenRequest) (string, error) {
	flags, err := openFlags(req.GetMode())
	if err != nil {
		return "", err
	}
	p := req.GetPath()
	if p == "" {
		return "", &os.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
	}
	if !path.IsAbs(p) {
		p = path.Join(sb.def.GetWorkdir()+"/", p)
		if !path.IsAbs(p) {
			p = "/" + p
		}
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", sb.pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: fmt.Errorf("modalfake cannot reach the container's filesystem (run it on the Docker host with rights over its containers): %w", err)}
	}
	defer unix.Close(root)
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o666
	}
	fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), how)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return "", &os.PathError{Op: "open", Path: p, Err: syscall.EISDIR}
	}
	id := modalID("fd")
	sb.mu.Lock()
	if sb.res != nil {
		sb.mu.Unlock()
		f.Close()
		return "", &os.PathError{Op: "open", Path: p, Err: errors.New("sandbox has finished")}
	}
	sb.files[id] = f
	sb.mu.Unlock()
	return id, nil
}

// openFlags maps a Python open() mode to open(2) flags.
func openFlags(mode string) (int, error) {
	m := strings.ReplaceAll(mode, "b", "")
	plus := strings.Contains(m, "+")
	m = strings.ReplaceAll(m, "+", "")
	if len(m) != 1 || strings.Count(mode, "+") > 1 || strings.Count(mode, "b") > 1 || strings.ContainsAny(mode, "t") {
		return 0, &os.PathError{Op: "open", Path: mode, Err: fmt.Errorf("%w: invalid mode %q", syscall.EINVAL, mode)}
	}
	var flags int
	switch m {
	case "r":
		flags = unix.O_RDONLY
	case "w":
		flags = unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC
	case "a":
		flags = unix.O_WRONLY | unix.O_CREAT | unix.O_APPEND
	case "x":
		flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL
	default:
		return 0, &os.PathError{Op: "open", Path: mode, Err: fmt.Errorf("%w: invalid mode %q", syscall.EINVAL, mode)}
	}
	if plus {
		flags = flags&^(unix.O_WRONLY|unix.O_RDONLY) | unix.O_RDWR
	}
	return flags, nil
}

// sysError turns an error into the message Modal's filesystem API returns.
func sysError(err error) *pb.SystemErrorMessage {
	code := pb.SystemErrorCode_SYSTEM_ERROR_CODE_UNSPECIFIED
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EPERM, syscall.ENOENT, syscall.EIO, syscall.ENXIO, syscall.ENOMEM, syscall.EACCES,
			syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.EMFILE, syscall.EFBIG, syscall.ENOSPC:
			code = pb.SystemErrorCode(errno)
		}
	}
	return pb.SystemErrorMessage_builder{ErrorCode: code, ErrorMessage: err.Error()}.Build()
}
