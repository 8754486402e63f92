package scan

import (
	"path"
	"strings"
)

// A command can act on another machine: ssh HOST CMD, scp and rsync to
// HOST:PATH, docker exec and kubectl exec run a command in a container,
// docker run -v /:/h runs one with the host's files mounted. What it sends
// there is checked as if it ran there, against every rule; its findings
// name the host (Finding.Remote) and are never located, so confinement of
// this environment (which does not confine that host) never relaxes them.
//
//   - ssh HOST CMD..., or the script ssh reads on stdin: the remote shell
//     starts in the remote home (~, relative paths), whose files berth
//     cannot see (no links followed).
//   - scp and rsync: a HOST:PATH destination is a write there; rsync
//     --delete into one removes what the source lacks, as locally.
//   - docker|podman exec CONTAINER CMD, kubectl|oc exec POD -- CMD: as on
//     another host (a container may hold volumes).
//   - docker|podman run [-v SRC:DST] [--mount ...] IMAGE CMD: a container
//     of its own is the image's business, but what it does to the host
//     paths mounted in it (-v /:/h makes rm -rf /h rm -rf /) is checked
//     against the floor: only the floor rules that reach paths, the
//     devices given to it (--device, --privileged), and kill-all when it
//     shares the host's processes (--pid=host).

// remoteCtx is where the command being checked runs when it is not this
// environment.
type remoteCtx struct {
	host string // for findings: "prod", "container web", "pod api"
	// mounts, for a container run from an image: its paths that are host
	// paths (container path to host path); nil for a host.
	mounts map[string]string
	// keep, for a container: the rules that can reach the host.
	keep map[string]bool
}

// hostPath maps a path inside a container to the host path mounted there;
// abs is false when no host path is.
func (r *remoteCtx) hostPath(p string, abs bool) (string, bool) {
	if !abs || p == homeMark || strings.HasPrefix(p, homeMark+"/") {
		return "", false
	}
	p = path.Clean(p)
	best := ""
	for c := range r.mounts {
		if (p == c || c == "/" || strings.HasPrefix(p, c+"/")) && len(c) > len(best) {
			best = c
		}
	}
	if best == "" {
		return "", false
	}
	rest := strings.TrimPrefix(p, best)
	return path.Join(r.mounts[best], rest), true
}

// pathRules are the floor rules about paths and devices: the ones a
// container run from an image can break the host with, through what is
// mounted in it.
var pathRules = []string{"rm-system-dir", "chmod-system-dir", "mv-system-dir", "mkfs-device", "disk-wipe", "disk-write", "sysrq", "too-large"}

// enterRemote checks what follows as running in r, and returns the
// function that comes back: the other side has its own home, working
// directory and links, none of which berth sees.
func (s *scanner) enterRemote(r *remoteCtx, cwd string) func() {
	prev, ctx, pcwd, links, made := s.remote, s.ctx, s.cwd, s.links, s.made
	if prev != nil && prev.mounts == nil && r.mounts == nil {
		r.host = prev.host + ", then " + r.host
	}
	s.remote, s.cwd = r, cwd
	s.ctx.Home, s.ctx.Resolve, s.ctx.BerthHome, s.ctx.ConfigPath, s.ctx.Prelude = "", nil, "", "", ""
	s.links, s.made = map[string]string{}, map[string]string{}
	return func() {
		s.remote, s.ctx, s.cwd, s.links, s.made = prev, ctx, pcwd, links, made
	}
}

// remoteChecks are the programs that copy to another machine or run a
// command in a container.
func remoteChecks() map[string]check {
	docker := check{pathRules, func(s *scanner, c call) { s.container(c) }}
	kube := check{nil, func(s *scanner, c call) { s.kubeExec(c) }}
	return map[string]check{
		"scp":    {append([]string{"rm-system-dir"}, writeRules...), func(s *scanner, c call) { s.scp(c.args, c.seg) }},
		"docker": docker, "podman": docker,
		"kubectl": kube, "oc": kube,
	}
}

// remoteSpec splits HOST:PATH (user@host:path, host::module); ok is false
// for a local path.
func remoteSpec(v string) (host, p string, ok bool) {
	i := strings.IndexByte(v, ':')
	if i <= 0 || strings.Contains(v[:i], "/") {
		return "", "", false
	}
	host, p = v[:i], strings.TrimPrefix(v[i+1:], ":")
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		host = host[at+1:]
	}
	return host, p, true
}

// remoteWrites checks a destination HOST:PATH of a copy as a write there.
// It reports whether dest was remote.
func (s *scanner) remoteWrite(dest arg, seg string, del bool) bool {
	host, p, ok := remoteSpec(dest.first())
	if !ok {
		return false
	}
	if p == "" {
		p = "~" // the remote home
	}
	defer s.enterRemote(&remoteCtx{host: host}, homeMark)()
	a := litArg(p)
	a.dyn = dest.dyn
	s.writeTarget(a, seg)
	if del {
		if rp, abs := s.resolvePath(p); abs && s.isFloorTree(rp) {
			s.add("rm-system-dir", seg, "rsync --delete into "+rp)
		} else {
			s.add("rm-recursive", seg, "rsync --delete")
		}
	}
	return true
}

// scp checks scp: its last operand is the destination.
func (s *scanner) scp(args []arg, seg string) {
	o := parseOpts(args, "cFiJloPS", nil, true)
	if len(o.operands) >= 2 {
		s.remoteWrite(o.operands[len(o.operands)-1], seg, false)
	}
}

// dockerValued are the options of docker (and podman) run and exec that
// take a value as the next word.
var dockerValued = map[string]bool{
	"-a": true, "--attach": true, "-c": true, "--cpu-shares": true, "--cidfile": true, "--cpus": true, "--cpuset-cpus": true,
	"--device": true, "--dns": true, "-e": true, "--env": true, "--env-file": true, "--entrypoint": true, "--expose": true,
	"--gpus": true, "-h": true, "--hostname": true, "--ipc": true, "-l": true, "--label": true, "--label-file": true,
	"--link": true, "--log-driver": true, "--log-opt": true, "-m": true, "--memory": true, "--mount": true, "--name": true,
	"--network": true, "--net": true, "-p": true, "--publish": true, "--pid": true, "--platform": true, "--pull": true,
	"--restart": true, "--runtime": true, "--security-opt": true, "--shm-size": true, "--stop-signal": true,
	"--stop-timeout": true, "--tmpfs": true, "-u": true, "--user": true, "--ulimit": true, "--userns": true, "--uts": true,
	"-v": true, "--volume": true, "--volumes-from": true, "-w": true, "--workdir": true, "--add-host": true,
	"--cap-add": true, "--cap-drop": true, "--group-add": true, "--health-cmd": true, "--detach-keys": true,
	"--memory-swap": true, "--pids-limit": true, "--cgroupns": true, "--cgroup-parent": true,
}

// dockerGlobal are docker's own options before the subcommand that take a
// value.
var dockerGlobal = map[string]bool{"-H": true, "--host": true, "-c": true, "--context": true, "--config": true, "-l": true, "--log-level": true}

// container checks docker and podman run and exec.
func (s *scanner) container(c call) {
	args := c.args
	for len(args) > 0 && strings.HasPrefix(args[0].first(), "-") {
		if dockerGlobal[args[0].first()] && len(args) > 1 {
			args = args[1:]
		}
		args = args[1:]
	}
	if len(args) > 0 && args[0].first() == "container" {
		args = args[1:]
	}
	if len(args) == 0 {
		return
	}
	sub := args[0].first()
	if sub != "run" && sub != "exec" && sub != "create" {
		return
	}
	r := &remoteCtx{mounts: map[string]string{}, keep: map[string]bool{}}
	cwd := "/"
	var entry []arg
	pidHost := false
	i := 1
	for ; i < len(args); i++ {
		v := args[i].first()
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		name, val, hasEq := strings.Cut(v, "=")
		if !hasEq && dockerValued[name] {
			if i+1 < len(args) {
				i++
				val = args[i].first()
			}
		}
		switch name {
		case "-v", "--volume":
			s.mount(r, val, "")
		case "--mount":
			s.mount(r, "", val)
		case "--device":
			hostDev, inside, _ := strings.Cut(val, ":")
			if inside == "" {
				inside = hostDev
			}
			r.mounts[inside] = hostDev
		case "--privileged":
			r.mounts["/dev"] = "/dev"
		case "--pid":
			pidHost = val == "host"
		case "-w", "--workdir":
			cwd = val
		case "--entrypoint":
			entry = []arg{litArg(val)}
		}
	}
	if i >= len(args) {
		return
	}
	target := args[i].first() // the image, or the container of exec
	inner := append(entry, args[i+1:]...)
	if len(inner) == 0 {
		return
	}
	if sub == "exec" {
		// A running container: what it has mounted is not known here.
		defer s.enterRemote(&remoteCtx{host: "container " + target}, cwd)()
		s.command(inner, ioInfo{}, "")
		return
	}
	if len(r.mounts) == 0 && !pidHost {
		return // nothing of the host in it: the image's business
	}
	for _, id := range pathRules {
		r.keep[id] = true
	}
	if pidHost {
		r.keep["kill-all"] = true
	}
	r.host = "the host, through container " + target
	defer s.enterRemote(r, cwd)()
	s.command(inner, ioInfo{}, "")
}

// mount notes a bind mount of docker run (-v SRC:DST[:opts], or --mount
// type=bind,source=SRC,target=DST): a host path seen inside.
func (s *scanner) mount(r *remoteCtx, volume, spec string) {
	var src, dst string
	if volume != "" {
		parts := strings.Split(volume, ":")
		if len(parts) < 2 {
			return // an anonymous volume
		}
		src, dst = parts[0], parts[1]
	} else {
		for _, kv := range strings.Split(spec, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "source", "src":
				src = v
			case "target", "destination", "dst":
				dst = v
			}
		}
	}
	if src == "" || dst == "" || !strings.HasPrefix(dst, "/") {
		return
	}
	if !strings.HasPrefix(src, "/") && !strings.HasPrefix(src, "~") && !strings.HasPrefix(src, ".") {
		return // a named volume: no host path
	}
	if p, abs := s.resolvePath(src); abs {
		r.mounts[path.Clean(dst)] = s.lands(p)
	}
}

// kubeExec checks kubectl (and oc) exec POD -- CMD: a command run in a
// pod, as on another host.
func (s *scanner) kubeExec(c call) {
	args := c.args
	sub := -1
	for i := 0; i < len(args); i++ {
		switch v := args[i].first(); {
		case v == "exec":
			sub = i
		case v == "-n" || v == "--namespace" || v == "--context" || v == "--kubeconfig" || v == "-s" || v == "--server" || v == "--cluster" || v == "--user":
			i++
			continue
		case strings.HasPrefix(v, "-"):
			continue
		default:
			return // another subcommand
		}
		break
	}
	if sub < 0 {
		return
	}
	rest := args[sub+1:]
	pod := ""
	var inner []arg
	for i := 0; i < len(rest); i++ {
		v := rest[i].first()
		switch {
		case v == "--":
			inner = rest[i+1:]
			i = len(rest)
		case v == "-c" || v == "--container" || v == "-n" || v == "--namespace" || v == "--context" || v == "-f" || v == "--filename" || v == "--kubeconfig" || v == "--pod-running-timeout":
			i++
		case strings.HasPrefix(v, "-"):
		case pod == "":
			pod = v
		default:
			inner = rest[i:] // the older form, without --
			i = len(rest)
		}
	}
	if len(inner) == 0 {
		return
	}
	defer s.enterRemote(&remoteCtx{host: "pod " + pod}, "/")()
	s.command(inner, ioInfo{}, "")
}
