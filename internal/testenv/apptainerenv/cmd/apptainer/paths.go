package main

import (
	"bufio"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// userInfo is the calling user as Apptainer names it in its paths.
type userInfo struct {
	uid  int
	name string
	home string
}

func currentUser() userInfo {
	u := userInfo{uid: os.Getuid(), name: strconv.Itoa(os.Getuid()), home: "/"}
	if pw, err := user.LookupId(strconv.Itoa(u.uid)); err == nil {
		u.name = pw.Username
		if pw.HomeDir != "" {
			u.home = pw.HomeDir
		}
	} else if h, err := os.UserHomeDir(); err == nil {
		u.home = h
	}
	return u
}

// configDir is the user configuration directory, where the instance list
// lives, chosen as Apptainer's syfs.ConfigDir does: APPTAINER_CONFIGDIR
// (or SINGULARITY_CONFIGDIR), else $HOME/.apptainer, with the home from
// the password database when HOME is unset, and / when the home cannot be
// read. So every process of a user with one HOME shares one list, and a
// process given a HOME of its own has its own.
func configDir() string {
	if d := envString("CONFIGDIR"); d != "" {
		return d
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = currentUser().home
	}
	if f, err := os.Open(home); err != nil {
		home = "/"
	} else {
		f.Close()
	}
	return filepath.Join(home, ".apptainer")
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// instanceBase is <configdir>/instances/app/<hostname>/<user>.
func instanceBase() string {
	return filepath.Join(configDir(), "instances", "app", hostname(), currentUser().name)
}

// instanceFile is where the state of instance name is kept.
func instanceFile(name string) string {
	return filepath.Join(instanceBase(), name, name+".json")
}

// logPaths are the .out and .err files of an instance.
func logPaths(name string) (out, errp string) {
	base := filepath.Join(configDir(), "instances", "logs", hostname(), currentUser().name)
	return filepath.Join(base, name+".out"), filepath.Join(base, name+".err")
}

// cacheDir is APPTAINER_CACHEDIR, else <configdir>/cache.
func cacheDir() string {
	if d := envString("CACHEDIR"); d != "" {
		return d
	}
	return filepath.Join(configDir(), "cache")
}

// tmpDir is APPTAINER_TMPDIR, else TMPDIR, else /tmp.
func tmpDir() string {
	if d := envString("TMPDIR"); d != "" {
		return d
	}
	return os.TempDir()
}

// conf holds the apptainer.conf settings the stand-in honours.
type conf struct {
	systemdCgroups bool
}

// loadConf reads the global -c file, else <prefix>/etc/apptainer/apptainer.conf
// beside the executable (where an install from source keeps it), else the
// stock defaults.
func loadConf() conf {
	c := conf{systemdCgroups: true}
	path := g.config
	if path == "" {
		if exe, err := os.Executable(); err == nil {
			path = filepath.Join(filepath.Dir(filepath.Dir(exe)), "etc", "apptainer", "apptainer.conf")
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return c
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.ToLower(strings.TrimSpace(v))
		if k == "systemd cgroups" {
			c.systemdCgroups = v == "yes"
		}
	}
	return c
}

// systemdRunning reports whether systemd is PID 1 (sd_booted's test).
func systemdRunning() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}
