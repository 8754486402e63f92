package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
)

// admin is an API client without a sandbox, for berth env and doctor.
type admin struct {
	creds credentials
	api   *apiclient.APIClient
}

func newAdmin(opts backend.Options) (*admin, error) {
	creds, err := loadCredentials(opts.Getenv)
	if err != nil {
		return nil, err
	}
	return &admin{creds: creds, api: creds.apiClient(httpClient(opts.Logger))}, nil
}

// berthSandboxes lists the sandboxes berth created (label berth=1),
// further filtered by extra labels, page by page.
func (a *admin) berthSandboxes(ctx context.Context, extra map[string]string) ([]apiclient.SandboxListItem, error) {
	labels := map[string]string{LabelBerth: "1"}
	for k, v := range extra {
		labels[k] = v
	}
	lj, _ := json.Marshal(labels)
	var all []apiclient.SandboxListItem
	cursor := ""
	for page := 0; page < 100; page++ {
		req := a.api.SandboxAPI.ListSandboxes(ctx).Labels(string(lj)).Limit(200)
		if cursor != "" {
			req = req.Cursor(cursor)
		}
		res, resp, err := req.Execute()
		if err != nil {
			return all, a.creds.apiErr(err, resp, "list sandboxes")
		}
		all = append(all, res.Items...)
		next := res.GetNextCursor()
		if next == "" || len(res.Items) == 0 {
			break
		}
		cursor = next
	}
	return all, nil
}

// envAdmin implements backend.EnvAdmin: berth env ls/rm/prune for berth's
// sandboxes, found by label.
type envAdmin struct{}

// List returns every sandbox labelled berth=1.
func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	a, err := newAdmin(opts)
	if err != nil {
		return nil, err
	}
	items, err := a.berthSandboxes(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]backend.EnvInfo, 0, len(items))
	for _, it := range items {
		created, _ := time.Parse(time.RFC3339Nano, it.GetCreatedAt())
		image := it.Labels[LabelImage]
		if image == "" {
			image = it.GetSnapshot()
		}
		out = append(out, backend.EnvInfo{
			Backend:    Name,
			Key:        it.Labels[LabelKey],
			State:      string(it.GetState()),
			ID:         it.Id,
			Image:      image,
			Created:    created,
			Persistent: it.Labels[LabelPersistent] == "1",
		})
	}
	return out, nil
}

// Remove deletes key's sandbox; a key without one is not an error.
// Daytona's list is eventually consistent (it is served from a search
// index), so a sandbox created moments ago may be missing from it: the
// sandbox is also looked up by its name, berth-<key>, which is read from
// the database at once.
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	a, err := newAdmin(opts)
	if err != nil {
		return err
	}
	items, err := a.berthSandboxes(ctx, map[string]string{LabelKey: key})
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, it := range items {
		ids[it.Id] = true
	}
	name := sandboxName(key)
	sb, resp, err := a.api.SandboxAPI.GetSandbox(ctx, name).Execute()
	switch {
	case err == nil:
		if sb.Labels[LabelBerth] == "1" && sb.Labels[LabelKey] == key {
			ids[sb.Id] = true
		}
	case resp != nil && resp.StatusCode == http.StatusNotFound:
	default:
		return a.creds.apiErr(err, resp, "get sandbox %s", name)
	}
	for id := range ids {
		if err := a.remove(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes a sandbox; one already gone is fine.
func (a *admin) remove(ctx context.Context, id string) error {
	_, resp, err := a.api.SandboxAPI.DeleteSandbox(ctx, id).Execute()
	if err != nil && (resp == nil || resp.StatusCode != 404) {
		return a.creds.apiErr(err, resp, "delete sandbox %s", id)
	}
	return nil
}

// Prune deletes berth's sandboxes that have not been running (stopped,
// archived, failed) for longer than maxAge, persistent ones included, and
// returns their keys.
func (envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	a, err := newAdmin(opts)
	if err != nil {
		return nil, err
	}
	items, err := a.berthSandboxes(ctx, nil)
	if err != nil {
		return nil, err
	}
	var removed []string
	now := time.Now()
	for _, it := range items {
		st := it.GetState()
		if !asleep[st] && !failed[st] {
			continue
		}
		since, err := time.Parse(time.RFC3339Nano, it.GetUpdatedAt())
		if err != nil || now.Sub(since) < maxAge {
			continue
		}
		if err := a.remove(ctx, it.Id); err != nil {
			return removed, err
		}
		removed = append(removed, it.Labels[LabelKey])
	}
	return removed, nil
}

// reaped records the API URLs whose dead owners were handled by this
// process: the sweep runs once per process and API, not per environment.
var reaped sync.Map

// reapOnce handles sandboxes whose berth died without letting go of them
// (a crash, a kill -9), once per process: throwaway ones are deleted,
// persistent ones stopped, as a clean exit would have done, so none runs
// on forever with auto-stop off. Only owners on this machine are judged.
func (b *Backend) reapOnce(ctx context.Context) {
	if _, done := reaped.LoadOrStore(b.creds.apiURL+"\x00"+b.creds.key, true); done {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a := &admin{creds: b.creds, api: b.api}
	items, err := a.berthSandboxes(ctx, nil)
	if err != nil {
		b.log.Warn("daytona: cleaning up after a crashed berth failed", "err", err)
		return
	}
	for _, it := range items {
		if it.GetState() != apiclient.SANDBOXSTATE_STARTED || !procmark.Gone(it.Labels[LabelOwner]) {
			continue
		}
		if it.Labels[LabelPersistent] == "1" {
			if _, resp, err := b.api.SandboxAPI.StopSandbox(ctx, it.Id).Execute(); err != nil {
				b.log.Warn("daytona: stop a sandbox of a crashed berth", "sandbox", it.Name, "err", b.creds.apiErr(err, resp, "stop"))
				continue
			}
			b.log.Info("daytona: stopped the sandbox of a crashed berth", "sandbox", it.Name)
			continue
		}
		if err := a.remove(ctx, it.Id); err != nil {
			b.log.Warn("daytona: delete a sandbox of a crashed berth", "sandbox", it.Name, "err", err)
			continue
		}
		b.log.Info("daytona: deleted the throwaway sandbox of a crashed berth", "sandbox", it.Name)
	}
}

// Doctor checks the credentials with one cheap call (a one-item list of
// berth's sandboxes) and reports the API it reached.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	a, err := newAdmin(opts)
	if err != nil {
		// The error says what is missing and what to set; the fix adds
		// only what it does not.
		return backend.Fingerprint{
			Summary: err.Error(),
			Fix:     "for a self-hosted Daytona, also set " + EnvAPIURL + " to its API's URL",
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lj, _ := json.Marshal(map[string]string{LabelBerth: "1"})
	res, resp, err := a.api.SandboxAPI.ListSandboxes(ctx).Labels(string(lj)).Limit(1).Execute()
	if err != nil {
		err = a.creds.apiErr(err, resp, "list sandboxes")
		fix := "check that " + a.creds.shown + " is Daytona's API (" + EnvAPIURL + ") and reachable"
		var ae *AuthError
		if errors.As(err, &ae) {
			fix = "check " + ae.Var + ": the API rejected it"
		}
		return backend.Fingerprint{Summary: "Daytona API at " + a.creds.shown + " did not accept the call", Details: []string{err.Error()}, Fix: fix}
	}
	fp := backend.Fingerprint{Usable: true, Summary: fmt.Sprintf("Daytona API at %s accepts %s", a.creds.shown, a.creds.keyVar)}
	if a.creds.target != "" {
		fp.Details = append(fp.Details, "target (region): "+a.creds.target)
	}
	if len(res.Items) > 0 {
		fp.Details = append(fp.Details, "berth has sandboxes there (berth env ls lists them)")
	}
	return fp
}
