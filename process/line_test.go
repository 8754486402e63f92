package process

import (
	"context"
	"reflect"
	"testing"

	"github.com/a55dbaac/berth/terminal"
)

// TestParseLine: the ":verb ..." lines of berth shell and what they ask
// for; anything else is a command.
func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		line string
		want Line
	}{
		{":bg sleep 5; echo done", Line{Start: &terminal.Request{Command: "sleep 5; echo done"}}},
		{":bgpty  python3 -i", Line{Start: &terminal.Request{Command: "python3 -i", PTY: true}}},
		{":ps", Line{Request: &Request{Action: "list"}}},
		{" :poll proc_ab12", Line{}}, // a leading blank: a command
		{":poll proc_ab12", Line{Request: &Request{Action: "poll", SessionID: "proc_ab12"}}},
		{":log proc_ab12", Line{Request: &Request{Action: "log", SessionID: "proc_ab12"}}},
		{":kill proc_ab12", Line{Request: &Request{Action: "kill", SessionID: "proc_ab12"}}},
		{":close proc_ab12", Line{Request: &Request{Action: "close", SessionID: "proc_ab12"}}},
		{":wait proc_ab12 30", Line{Request: &Request{Action: "wait", SessionID: "proc_ab12", Timeout: 30}}},
		{":wait proc_ab12", Line{Request: &Request{Action: "wait", SessionID: "proc_ab12"}}},
		{":write proc_ab12 y", Line{Request: &Request{Action: "write", SessionID: "proc_ab12", Data: "y"}}},
		{":submit proc_ab12 print(1) ", Line{Request: &Request{Action: "submit", SessionID: "proc_ab12", Data: "print(1)"}}},
		{":", Line{}},
		{": ; echo hi", Line{}},
		{":unknown x", Line{}},
		{"echo :ps", Line{}},
	} {
		got, ok := ParseLine(c.line)
		if want := c.want.Start != nil || c.want.Request != nil; ok != want || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, want)
		}
	}
}

// doer records what a Line asks of it.
type doer struct {
	bg  *terminal.Request
	req *Request
}

func (d *doer) Background(_ context.Context, key string, req terminal.Request) StartResult {
	d.bg = &req
	return StartResult{}
}

func (d *doer) Process(_ context.Context, key string, req Request) Result {
	d.req = &req
	return Result{}
}

// TestLineDo: a background line starts its command in the workdir given;
// the others go to the process tool as parsed.
func TestLineDo(t *testing.T) {
	l, _ := ParseLine(":bg make")
	var d doer
	l.Do(context.Background(), &d, "k", "/src")
	if d.bg == nil || d.bg.Command != "make" || d.bg.Workdir != "/src" || d.req != nil {
		t.Fatalf(":bg ran %+v / %+v", d.bg, d.req)
	}
	l, _ = ParseLine(":kill proc_1")
	d = doer{}
	l.Do(context.Background(), &d, "k", "/src")
	if d.req == nil || d.req.Action != "kill" || d.req.SessionID != "proc_1" || d.bg != nil {
		t.Fatalf(":kill ran %+v / %+v", d.bg, d.req)
	}
}
