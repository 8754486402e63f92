package backend

import "testing"

func TestContainerDir(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "/workspace",
		"~":                  "/workspace",
		".":                  "/workspace",
		"src":                "/workspace",
		"~/proj":             "/root/proj",
		"/home/alice/proj":   "/workspace",
		"/Users/alice":       "/workspace",
		"/private/var/x":     "/workspace",
		`C:\Users\alice`:     "/workspace",
		"/srv/app/":          "/srv/app",
		" /opt//data/../x ":  "/opt/x",
		"/homestead/project": "/homestead/project",
	} {
		if got := ContainerDir(in, "/root", "/workspace"); got != want {
			t.Errorf("ContainerDir(%q) = %q, want %q", in, got, want)
		}
	}
}
