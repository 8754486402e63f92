package daytona

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"

	toolbox "github.com/daytona/clients/toolbox-api-client-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
)

// finishScript turns an uploaded temporary file ($1) into the file $2:
// exactly $3 bytes, mode $4 (octal) less the umask, and only if $2 does not
// exist yet (a hard link cannot replace a file). It removes the temporary
// file only once it is linked, so a run repeated after its answer was lost
// (berth retries a 502) knows it was done: the temporary file is gone and
// $2 has the size. On failure berth removes the temporary file.
const finishScript = `t=$1
if [ ! -e "$t" ]; then
  if [ -f "$2" ] && [ "$(($(wc -c <"$2")))" -eq "$3" ]; then exit 0; fi
  echo "the uploaded $t is gone" >&2; exit 7
fi
s=$(($(wc -c <"$t"))) || exit 3
if [ "$s" -ne "$3" ]; then echo "wrote $s of $3 bytes" >&2; exit 4; fi
m=$(printf %o $((0$4 & ~0$(umask))))
chmod "$m" "$t" || exit 5
if ln "$t" "$2" 2>/dev/null; then rm -f "$t"; exit 0; fi
echo "$2 exists or cannot be created" >&2
exit 6`

// WriteFile implements backend.FileWriter through the toolbox's file API:
// the bytes are uploaded to a temporary file beside name in one request,
// and one execute call checks the size, sets the mode and links the file
// into place (refusing to replace an existing one).
func (b *Backend) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	if !path.IsAbs(name) {
		return fmt.Errorf("daytona: write %s: not an absolute path", name)
	}
	tmp := path.Join(path.Dir(name), ".berth-up-"+randhex.String(8))
	finish := execLine([]string{"/bin/sh", "-c", finishScript, "berth-fw", tmp, name, strconv.FormatInt(size, 10), strconv.FormatUint(uint64(perm.Perm()), 8)})
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	ref := b.sandbox
	b.mu.Unlock()

	err := b.upload(ctx, ref.tb, tmp, r, size)
	if err != nil && ctx.Err() == nil && statusOf(err) != 0 && mayBeAsleep(err) {
		// The only retry: a sandbox that fell asleep gets the bytes after
		// it woke, provided the reader had not been consumed yet.
		if woke, werr := b.wakeUp(ctx, ref.gen); werr == nil && woke {
			if seeker, ok := r.(io.Seeker); ok {
				if _, serr := seeker.Seek(0, io.SeekStart); serr == nil {
					b.mu.Lock()
					ref = b.sandbox
					b.mu.Unlock()
					err = b.upload(ctx, ref.tb, tmp, r, size)
				}
			}
		}
	}
	removeTmp := func() { b.execute(context.WithoutCancel(ctx), ref.tb, execLine([]string{"rm", "-f", tmp})) }
	if err != nil {
		removeTmp()
		return fmt.Errorf("daytona: write %s: %w", name, err)
	}
	res, err := b.execute(ctx, ref.tb, finish)
	if err != nil {
		removeTmp()
		return fmt.Errorf("daytona: write %s: %w", name, err)
	}
	if res.GetExitCode() != 0 {
		removeTmp()
		return fmt.Errorf("daytona: write %s: %s (exit %d)", name, strings.TrimSpace(res.Result), res.GetExitCode())
	}
	return nil
}

// upload sends exactly size bytes of r to the file at p (POST
// /files/upload-v2 with a raw body).
func (b *Backend) upload(ctx context.Context, tb *toolbox.APIClient, p string, r io.Reader, size int64) error {
	cfg := tb.GetConfig()
	u := cfg.Servers[0].URL + "/files/upload-v2?path=" + url.QueryEscape(p)
	// A 429 or 5xx is retried with the same bytes when r can produce them
	// again, each attempt reading them on its own (see replayableBody).
	var reqBody io.Reader = io.LimitReader(r, size)
	replay, getBody, ok := replayableBody(r, size)
	if ok {
		reqBody = replay
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, reqBody)
	if err != nil {
		return err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	} else if ok {
		req.GetBody = getBody
	}
	for k, v := range cfg.DefaultHeader {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := b.hc.Do(req)
	if err != nil {
		if isConnErr(err) {
			return &backend.UnreachableError{Backend: Name, Target: b.creds.shown, Err: err, Hint: "check " + EnvAPIURL + " and the network"}
		}
		return fmt.Errorf("upload: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		msg := jsonField(body, "message")
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		return &APIError{Op: "upload " + p, Status: resp.StatusCode, Msg: msg, GaveUp: gaveUp(resp)}
	}
	return nil
}

// execute runs one command line through the toolbox's execute call.
func (b *Backend) execute(ctx context.Context, tb *toolbox.APIClient, line string) (*toolbox.ExecuteResponse, error) {
	res, resp, err := tb.ProcessAPI.ExecuteCommand(ctx).Request(*toolbox.NewExecuteRequest(line)).Execute()
	if err != nil {
		if resp == nil && isConnErr(err) {
			return nil, &backend.UnreachableError{Backend: Name, Target: b.creds.shown, Err: err, Hint: "check " + EnvAPIURL + " and the network"}
		}
		return nil, toolboxErr(err, resp, "execute")
	}
	return res, nil
}

// execDecoder runs its arguments as a command after decoding each: the
// first byte is dropped (it keeps an empty argument from being empty) and
// the rest is printf %b text. It holds no single quote.
const execDecoder = `for a do shift; b=$(printf %bx "${a#_}"); set -- "$@" "${b%x}"; done; exec "$@"`

// execLine renders argv as a command line for the toolbox's execute call
// that means the same to every daemon Daytona has shipped: the current one
// pipes the line into the user's shell (zsh, bash or sh; execute.go), older
// ones split it on spaces outside quotes and drop the quotes, with no
// escapes and no other syntax. The line is /bin/sh running execDecoder on
// argv, each word in single quotes and holding no quote, backslash,
// control or non-ASCII byte: those travel as printf %b escapes. Both
// readings give the decoder the same words, and nothing in them expands.
func execLine(argv []string) string {
	var b strings.Builder
	b.WriteString("/bin/sh -c '" + execDecoder + "' berth-exec")
	for _, a := range argv {
		b.WriteString(" '_")
		for _, c := range []byte(a) {
			if c < 0x20 || c >= 0x7f || c == '\'' || c == '\\' {
				b.Write([]byte{'\\', '0', '0' + c>>6, '0' + (c>>3)&7, '0' + c&7})
				continue
			}
			b.WriteByte(c)
		}
		b.WriteByte('\'')
	}
	return b.String()
}

// RunOneShot implements backend.OneShotRunner the way the reference system
// runs a command on Daytona: it asks the API for the sandbox's state
// (starting it when it sleeps), then runs the command as one blocking
// toolbox execute, `sh -c <command>`, output returned at the end. berth
// bench times it as the baseline of the daytona backend.
func (b *Backend) RunOneShot(ctx context.Context, command string) (int, error) {
	b.mu.Lock()
	ref := b.sandbox
	b.mu.Unlock()
	sb, err := b.get(ctx, ref.id)
	if err != nil {
		return -1, err
	}
	if sb.GetState() != "started" {
		if _, err := b.wakeUp(ctx, ref.gen); err != nil {
			return -1, err
		}
		b.mu.Lock()
		ref = b.sandbox
		b.mu.Unlock()
	}
	res, err := b.execute(ctx, ref.tb, execLine([]string{"sh", "-c", command}))
	if err != nil {
		return -1, err
	}
	return int(res.GetExitCode()), nil
}
