// Package berthhome finds berth's home directory ($BERTH_HOME, else
// ~/.berth). It is a leaf package: the berth front binary needs the home
// (the daemon's socket is there) without the configuration loader.
package berthhome

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Dir returns the berth home: $BERTH_HOME if set (a leading ~ expanded),
// else ~/.berth; always absolute. getenv nil means os.Getenv.
func Dir(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if h := getenv("BERTH_HOME"); h != "" {
		p, err := Expand(h, getenv)
		if err != nil {
			return "", fmt.Errorf("BERTH_HOME=%q: %w", h, err)
		}
		return filepath.Abs(p)
	}
	u, err := userHome(getenv)
	if err != nil {
		return "", fmt.Errorf("cannot find the berth home (set BERTH_HOME): %w", err)
	}
	return filepath.Abs(filepath.Join(u, ".berth"))
}

// userHome returns $HOME from getenv, else the user's home directory.
func userHome(getenv func(string) string) (string, error) {
	if h := getenv("HOME"); h != "" {
		return h, nil
	}
	return os.UserHomeDir()
}

// Expand replaces a leading "~" or "~/" with the user's home directory.
func Expand(p string, getenv func(string) string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	h, err := userHome(getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(h, p[1:]), nil
}
