package daytonafake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"time"

	toolbox "github.com/daytona/clients/toolbox-api-client-go"
)

// dirsScript prints the container user's home directory and the daemon's
// working directory (the image's WORKDIR, else the home: the runner sets
// DAYTONA_USER_HOME_AS_WORKDIR when the image has none), one per line.
const dirsScript = `printf '%s\n' "$HOME"
if [ "$PWD" = / ] || [ -z "$PWD" ]; then printf '%s\n' "$HOME"; else printf '%s\n' "$PWD"; fi`

// dirs returns the sandbox's home and working directories, asked once per
// container.
func (sb *sandbox) dirs(ctx context.Context) (home, work string) {
	sb.s.mu.Lock()
	id := sb.containerID
	if sb.dirsOf == id && id != "" {
		home, work = sb.home, sb.work
		sb.s.mu.Unlock()
		return home, work
	}
	sb.s.mu.Unlock()
	var out bytes.Buffer
	if code, err := sb.run(ctx, execOpts{argv: []string{"/bin/sh", "-c", dirsScript}}, &out, io.Discard); err != nil || code != 0 {
		return "/", "/"
	}
	lines := strings.SplitN(strings.TrimRight(out.String(), "\n"), "\n", 2)
	home, work = "/", "/"
	if len(lines) == 2 {
		home, work = lines[0], lines[1]
	}
	sb.s.mu.Lock()
	sb.dirsOf, sb.home, sb.work = id, home, work
	sb.s.mu.Unlock()
	return home, work
}

// workDir is where toolbox processes start when the call names no cwd.
func (sb *sandbox) workDir(ctx context.Context) string {
	_, w := sb.dirs(ctx)
	return w
}

// userHomeDir is GET /user-home-dir.
func (s *Server) userHomeDir(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	home, _ := sb.dirs(r.Context())
	writeJSON(w, http.StatusOK, toolbox.NewUserHomeDirResponse(home))
}

// workDir is GET /work-dir.
func (s *Server) workDir(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	_, work := sb.dirs(r.Context())
	writeJSON(w, http.StatusOK, toolbox.NewWorkDirResponse(work))
}

var bulkField = regexp.MustCompile(`^files\[(\d+)\]\.(path|file)$`)

// bulkUpload is POST /files/bulk-upload: a multipart form whose fields
// files[i].path and files[i].file carry each file's destination and bytes
// (the SDK's FileSystem.uploadFile). Each file is written like
// /files/upload-v2 writes one: parents created, an existing file replaced.
func (s *Server) bulkUpload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "expected a multipart/form-data body")
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	paths := map[int]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "read the multipart body: "+err.Error())
			return
		}
		m := bulkField.FindStringSubmatch(part.FormName())
		if m == nil {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("unexpected field %q: want files[i].path and files[i].file", part.FormName()))
			return
		}
		i, _ := strconv.Atoi(m[1])
		if m[2] == "path" {
			b, _ := io.ReadAll(io.LimitReader(part, 64<<10))
			paths[i] = string(b)
			continue
		}
		p, ok := paths[i]
		if !ok || p == "" {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("files[%d].file comes before its files[%d].path", i, i))
			return
		}
		var errOut bytes.Buffer
		code, err := sb.run(r.Context(), execOpts{argv: []string{"/bin/sh", "-c", uploadScript, "upload", p}, stdin: part}, io.Discard, &errOut)
		switch {
		case err != nil:
			toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error())
			return
		case code != 0:
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("write %s: %s", p, strings.TrimSpace(errOut.String())))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// bulkDownload is POST /files/bulk-download: {"paths": [...]} answered
// with a multipart/form-data body holding, for each path, a part named
// "file" with the bytes or a part named "error" with an ErrorResponse as
// JSON, the path as the part's filename.
func (s *Server) bulkDownload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req toolbox.FilesDownloadRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Paths) == 0 {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeInvalidRequestBody, "paths is required")
		return
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range req.Paths {
		var out, errOut bytes.Buffer
		code, err := sb.run(r.Context(), execOpts{argv: []string{"/bin/sh", "-c", fileScript, "download", p}}, &out, &errOut)
		status, dcode, msg := 0, toolbox.DaemonErrorCode(""), ""
		switch {
		case err != nil:
			status, dcode, msg = http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error()
		case code == 44:
			status, dcode, msg = http.StatusNotFound, toolbox.DAEMONERRORCODE_CodeFileNotFound, "file not found: "+p
		case code == 45:
			status, dcode, msg = http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "path is a directory: "+p
		case code == 46:
			status, dcode, msg = http.StatusForbidden, toolbox.DAEMONERRORCODE_CodeFileAccessDenied, "permission denied: "+p
		case code != 0:
			status, dcode, msg = http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, strings.TrimSpace(errOut.String())
		}
		h := textproto.MIMEHeader{}
		if status != 0 {
			e := toolbox.NewErrorResponse(msg, r.URL.Path, int32(status), time.Now().UTC().Format(time.RFC3339))
			e.SetCode(dcode)
			e.SetSource("DAYTONA_DAEMON")
			b, _ := json.Marshal(e)
			h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "error", "filename": p}))
			h.Set("Content-Type", "application/json")
			pw, _ := mw.CreatePart(h)
			pw.Write(b)
			continue
		}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": p}))
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(out.Len()))
		pw, _ := mw.CreatePart(h)
		pw.Write(out.Bytes())
	}
	mw.Close()
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(body.Bytes())
}
