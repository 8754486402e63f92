package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
)

// psHandler answers GET /ps on berth serve with every background process
// of every environment, as the process tool's list action shows them.
func psHandler(m *manager.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		b, err := wire.MarshalJSON(m.Process(r.Context(), "", process.Request{Action: "list"}))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
}

func newPsCmd() *cobra.Command {
	var url, token string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the background processes of a running berth serve",
		Long: `List the background processes (terminal background=true) of every environment
of a running 'berth serve', through its token-protected /ps endpoint. For the
processes of a 'berth shell' session, type :ps in that session.`,
		Example: `  BERTH_TOKEN=... berth ps
  berth ps --url http://127.0.0.1:8765 --token "$BERTH_TOKEN" --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = os.Getenv("BERTH_TOKEN")
			}
			if token == "" {
				return fmt.Errorf("no token: pass --token or set BERTH_TOKEN to the token berth serve uses")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			endpoint := strings.TrimSuffix(strings.TrimSuffix(url, "/"), "/mcp") + "/ps"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
			if err != nil {
				return fmt.Errorf("--url %q: %w", url, err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("reach berth serve at %s: %w (is it running?)", endpoint, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
			if err != nil {
				return fmt.Errorf("read %s: %w", endpoint, err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %s: %s", endpoint, resp.Status, strings.TrimSpace(string(body)))
			}
			if asJSON {
				os.Stdout.Write(body)
				return nil
			}
			var list struct {
				Processes []map[string]any `json:"processes"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				return fmt.Errorf("decode %s: %w", endpoint, err)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION_ID\tSTATUS\tPID\tUPTIME\tCWD\tCOMMAND")
			for _, p := range list.Processes {
				status := fmt.Sprint(p["status"])
				if code, ok := p["exit_code"]; ok {
					status = fmt.Sprintf("%s (%v)", status, code)
				}
				up, _ := p["uptime_seconds"].(float64)
				pid := "-"
				if v, ok := p["pid"].(float64); ok {
					pid = fmt.Sprint(int(v))
				}
				cmdline := strings.ReplaceAll(fmt.Sprint(p["command"]), "\n", " ")
				fmt.Fprintf(w, "%v\t%s\t%s\t%s\t%v\t%s\n", p["session_id"], status, pid, (time.Duration(up) * time.Second).String(), p["cwd"], cmdline)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8765", "address of the berth serve to ask")
	cmd.Flags().StringVar(&token, "token", "", "bearer token of that server (default $BERTH_TOKEN)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
