package scan

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// systemDirs are the directories whose recursive removal (or recursive
// chmod/chown, or moving away) is on the floor. They are the places a Linux
// or macOS system cannot run without: the root, the FHS top level
// directories (binaries, libraries, configuration, boot files, devices,
// kernel interfaces, variable state, every user's home), the /usr
// hierarchy's big subtrees, and the macOS equivalents. /tmp and /var/tmp
// are not on it: clearing them is ordinary (and needs approval when
// recursive, like any tree). The user's own home directory (Context.Home,
// ~, $HOME) is added at check time.
var systemDirs = map[string]bool{
	"/": true, "/bin": true, "/boot": true, "/dev": true, "/etc": true, "/home": true,
	"/lib": true, "/lib32": true, "/lib64": true, "/libx32": true, "/media": true, "/mnt": true,
	"/opt": true, "/proc": true, "/root": true, "/run": true, "/sbin": true, "/snap": true,
	"/srv": true, "/sys": true, "/usr": true, "/var": true,
	"/usr/bin": true, "/usr/sbin": true, "/usr/lib": true, "/usr/lib32": true, "/usr/lib64": true,
	"/usr/libexec": true, "/usr/include": true, "/usr/local": true, "/usr/share": true, "/usr/src": true,
	"/var/lib": true, "/var/log": true, "/var/spool": true, "/var/mail": true,
	"/nix": true, "/nix/store": true,
	// Trees the system cannot run (or be updated) without: the multiarch
	// libraries, kernel modules and firmware, the package databases.
	"/lib/x86_64-linux-gnu": true, "/usr/lib/x86_64-linux-gnu": true, "/lib/aarch64-linux-gnu": true,
	"/usr/lib/aarch64-linux-gnu": true, "/lib/i386-linux-gnu": true, "/usr/lib/i386-linux-gnu": true,
	"/lib/arm-linux-gnueabihf": true, "/usr/lib/arm-linux-gnueabihf": true,
	"/lib/modules": true, "/usr/lib/modules": true, "/lib/firmware": true, "/usr/lib/firmware": true,
	"/lib/systemd": true, "/usr/lib/systemd": true, "/boot/efi": true,
	"/var/lib/dpkg": true, "/var/lib/apt": true, "/var/lib/rpm": true, "/var/lib/pacman": true,
	"/var/lib/systemd": true,
	"/System":          true, "/Library": true, "/Applications": true, "/Users": true, "/Volumes": true,
	"/private": true, "/private/etc": true, "/private/var": true,
}

// homeMark stands for the user's home directory when Context.Home is not
// known: "~", "$HOME" and "${HOME}" resolve to it.
const homeMark = "~"

// unknownPart stands for a part of a word that is certainly not empty but
// only known at run time (${X:?}, $(...) of a known-harmless shape): it can
// never spell a system directory.
const unknownPart = "\u2026"

// HasGlob reports whether s contains a glob metacharacter.
func HasGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// MatchesAnything reports whether a glob component matches (nearly) every
// name: "*", ".*", "*.*", "?*", ".??*".
func MatchesAnything(base string) bool {
	return strings.Contains(base, "*") && strings.Trim(base, "*?.") == ""
}

// resolvePath turns a word value into a cleaned path: ~ and the home mark
// become the home directory, a relative path is joined to cwd when cwd is
// known. abs reports whether the result is absolute (or home-rooted).
func (s *scanner) resolvePath(p string) (string, bool) {
	raw, abs := s.rawPath(p)
	if raw == "" {
		return "", false
	}
	return path.Clean(raw), abs
}

// rawPath is resolvePath without the final cleaning: "a/../b" keeps its
// "..", which the kernel applies after following a link. In a container
// (remoteCtx with mounts) the path is the host path mounted there, or
// not known when nothing of the host is.
func (s *scanner) rawPath(p string) (string, bool) {
	raw, abs := s.localPath(p)
	if r := s.remote; r != nil && r.mounts != nil {
		return r.hostPath(raw, abs)
	}
	return raw, abs
}

// localPath is rawPath where the command runs: ~ and relative paths
// resolved, nothing mapped.
func (s *scanner) localPath(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	home := s.ctx.Home
	switch {
	case p == homeMark || strings.HasPrefix(p, homeMark+"/"):
		if home != "" {
			p = home + p[len(homeMark):]
		} else {
			return p, true
		}
	case strings.HasPrefix(p, "~"):
		// ~user: another user's home.
		name, rest, _ := strings.Cut(p[1:], "/")
		if name == "root" {
			p = "/root/" + rest
		} else {
			p = "/home/" + name + "/" + rest
		}
	}
	if !strings.HasPrefix(p, "/") {
		if s.cwd == "" {
			return p, false
		}
		p = s.cwd + "/" + p
	}
	return p, true
}

// lands returns where the word value v lands once links are followed:
// through links the command made or the file system has, and with a ".."
// applied after the link before it, as the kernel does.
func (s *scanner) lands(v string) string {
	p, abs := s.resolvePath(v)
	if raw, _ := s.rawPath(v); abs && s.ctx.Resolve != nil && hasDotDot(raw) {
		if r := path.Clean(s.ctx.Resolve(raw)); strings.HasPrefix(r, "/") {
			return s.followed(r, true)
		}
	}
	return s.followed(p, abs)
}

// hasDotDot reports whether a path has a ".." component.
func hasDotDot(p string) bool {
	return p == ".." || strings.HasPrefix(p, "../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../")
}

// isHome reports whether p (resolved) is the user's home directory.
func (s *scanner) isHome(p string) bool {
	return p == homeMark || (s.ctx.Home != "" && (p == path.Clean(s.ctx.Home) || p == s.followed(path.Clean(s.ctx.Home), true)))
}

// followed returns where the absolute path p lands once symbolic links are
// followed (Context.Resolve), or p when it is not absolute or nothing can
// be followed here. Results are kept for the rest of the check.
func (s *scanner) followed(p string, abs bool) string {
	if !abs || !strings.HasPrefix(p, "/") {
		return p
	}
	if r, ok := s.links[p]; ok {
		return r
	}
	r := p
	for range 8 { // links this command makes (ln -s) before it uses them
		q := r
		for link, target := range s.made {
			if r == link || strings.HasPrefix(r, link+"/") {
				q = target + r[len(link):]
				break
			}
		}
		if q == r {
			break
		}
		r = q
	}
	if s.ctx.Resolve != nil {
		if q := path.Clean(s.ctx.Resolve(r)); strings.HasPrefix(q, "/") {
			r = q
		}
	}
	if len(s.links) < 4096 {
		s.links[p] = r
	}
	return r
}

// operandFollowed returns where a removal operand lands: rm -r follows
// the links of the directories above the operand, and the operand's own
// link only when it is written with a trailing slash (LINK/ is the
// target; LINK alone is the link).
func (s *scanner) operandFollowed(raw, p string, abs bool) string {
	if !abs || strings.HasSuffix(raw, "/") || strings.HasSuffix(raw, "/.") || p == "/" {
		return s.lands(raw)
	}
	dir, base := path.Split(strings.TrimRight(raw, "/"))
	if dir == "" {
		dir = "."
	}
	return path.Join(s.lands(dir), base)
}

// isLink reports whether the absolute path p is, or goes through, a link.
func (s *scanner) isLink(p string, abs bool) bool {
	return s.followed(p, abs) != p
}

// NativeResolve follows the symbolic links of an absolute path on this
// machine, component by component, as the kernel would: a link is
// replaced by what it points to (a dangling one too), and once a
// component does not exist the rest is appended as written, so a path
// that does not exist yet still lands where its existing parts point. It
// is Context.Resolve for environments whose files are this machine's.
func NativeResolve(p string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	done := "/"
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{next}, todo...)...)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > 40 {
			return p // a loop: the kernel gives up too (ELOOP)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return p
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		todo = append(strings.Split(strings.Trim(target, "/"), "/"), todo...)
	}
	return done
}

// NativeParentPID returns the parent of process pid on this machine (from
// /proc), or "" when it cannot be read: the $PPID a shell of this
// machine's sees.
func NativeParentPID(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}

// isSystemDir reports whether p (resolved, possibly a glob) names / or a
// system directory or the home directory.
func (s *scanner) isSystemDir(p string) bool {
	if systemDirs[p] || s.isHome(p) {
		return true
	}
	if !HasGlob(p) {
		return false
	}
	for d := range systemDirs {
		if ok, _ := path.Match(p, d); ok {
			return true
		}
	}
	if s.ctx.Home != "" {
		if ok, _ := path.Match(p, path.Clean(s.ctx.Home)); ok {
			return true
		}
	}
	return false
}

// isFloorTree reports whether removing p recursively (or changing it
// recursively) takes a system directory with it: p is / or a system
// directory or the home, a glob matching one, or a glob matching everything
// inside one ("/usr/*", "~/.*").
func (s *scanner) isFloorTree(p string) bool {
	if s.isSystemDir(p) {
		return true
	}
	dir, base := path.Split(p)
	if dir == "" || !MatchesAnything(base) {
		return false
	}
	return s.isSystemDir(path.Clean(dir))
}

// diskRe matches the block devices berth refuses to write to, format or
// wipe: SCSI/SATA, IDE, virtio, Xen, NVMe, MMC/SD, device mapper, RAID,
// loop, network block devices and the /dev/disk and /dev/mapper aliases;
// /dev/mem, /dev/kmem and /dev/port are kernel memory.
var diskRe = regexp.MustCompile(`^/dev/(sd[a-z]+[0-9]*|hd[a-z]+[0-9]*|vd[a-z]+[0-9]*|xvd[a-z]+[0-9]*|nvme[0-9]+(n[0-9]+(p[0-9]+)?)?|mmcblk[0-9]+(p[0-9]+|boot[0-9]+)?|dm-[0-9]+|md[0-9]+(p[0-9]+)?|md/.+|loop[0-9]+(p[0-9]+)?|nbd[0-9]+(p[0-9]+)?|rbd[0-9]+|zd[0-9]+|bcache[0-9]+|sr[0-9]+|mapper/.+|disk/.+|mem|kmem|port)$`)

// diskSamples are matched against a glob to tell whether it could name a disk.
var diskSamples = []string{"/dev/sda", "/dev/sda1", "/dev/hda", "/dev/vda", "/dev/vda1", "/dev/xvda", "/dev/nvme0n1", "/dev/nvme0n1p1", "/dev/mmcblk0", "/dev/dm-0", "/dev/md0", "/dev/loop0", "/dev/mapper/root"}

// isDisk reports whether p (resolved) is a block device or kernel memory.
func isDisk(p string) bool {
	if diskRe.MatchString(p) {
		return true
	}
	if strings.HasPrefix(p, "/dev/") && HasGlob(p) {
		for _, d := range diskSamples {
			if ok, _ := path.Match(p, d); ok {
				return true
			}
		}
	}
	return false
}

// isDevicePath reports whether p is under /dev and not one of the harmless
// character devices: a formatting or wiping tool pointed there is aimed at
// a device.
func isDevicePath(p string) bool {
	if !strings.HasPrefix(p, "/dev/") {
		return false
	}
	switch p {
	case "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty":
		return false
	}
	return !strings.HasPrefix(p, "/dev/fd/") && !strings.HasPrefix(p, "/dev/shm/") && !strings.HasPrefix(p, "/dev/pts/")
}

// shellRCFiles are the startup files of the common shells (and readline's).
var shellRCFiles = map[string]bool{
	".bashrc": true, ".bash_profile": true, ".bash_login": true, ".bash_logout": true, ".bash_aliases": true,
	".profile": true, ".zshrc": true, ".zshenv": true, ".zprofile": true, ".zlogin": true, ".zlogout": true,
	".kshrc": true, ".mkshrc": true, ".cshrc": true, ".tcshrc": true, ".login": true, ".inputrc": true,
}

// dotenvTemplates are .env-style names that hold examples, not secrets.
var dotenvTemplates = map[string]bool{".env.example": true, ".env.sample": true, ".env.template": true, ".env.dist": true, ".env.defaults": true}

// sensitiveWrite returns the rule a write to p (resolved) falls under:
// a floor rule for disks, kernel memory and sysrq, a dangerous rule for the
// sensitive paths, or "" for an ordinary file.
func (s *scanner) sensitiveWrite(p string) string {
	if p == "" {
		return ""
	}
	if isDisk(p) {
		return "disk-write"
	}
	if p == "/proc/sysrq-trigger" {
		return "sysrq"
	}
	if p == "/etc" || strings.HasPrefix(p, "/etc/") || p == "/private/etc" || strings.HasPrefix(p, "/private/etc/") {
		return "write-etc"
	}
	if s.underBerth(p) || p != "" && s.underBerthLinked(p) {
		return "write-berth-config"
	}
	parts := strings.Split(p, "/")
	for _, c := range parts {
		if c == ".ssh" {
			return "write-ssh"
		}
	}
	base := path.Base(p)
	if id := gitWrite(parts); id != "" {
		return id
	}
	switch {
	case shellRCFiles[base]:
		return "write-shell-rc"
	case strings.HasSuffix(p, "/.config/fish/config.fish") || strings.Contains(p, "/.config/fish/conf.d/"):
		return "write-shell-rc"
	case base == ".netrc" || base == "_netrc":
		return "write-netrc"
	case (base == ".env" || strings.HasPrefix(base, ".env.")) && !dotenvTemplates[base]:
		return "write-dotenv"
	}
	return ""
}

// gitWrite returns the rule for a write into a repository's git
// directory that git later acts on as the user (write-git-hooks,
// write-git-config), or "". parts is the path split at "/". The git
// directory of a submodule or a linked worktree (.git/modules/NAME,
// .git/worktrees/NAME) has hooks and config of its own.
func gitWrite(parts []string) string {
	for i, c := range parts {
		if c != ".git" {
			continue
		}
		rest := parts[i+1:]
		for len(rest) >= 2 && (rest[0] == "modules" || rest[0] == "worktrees") {
			rest = rest[2:]
		}
		switch {
		case len(rest) >= 1 && rest[0] == "hooks":
			return "write-git-hooks"
		case len(rest) == 1 && (rest[0] == "config" || rest[0] == "config.worktree" || rest[0] == "commondir"):
			return "write-git-config"
		}
	}
	return ""
}

// underBerthLinked reports whether p is under berth's home or config as
// they are once their own links are followed (a BERTH_HOME that is itself
// a link).
func (s *scanner) underBerthLinked(p string) bool {
	if s.ctx.Resolve == nil {
		return false
	}
	if h := s.ctx.BerthHome; h != "" {
		if h = s.followed(path.Clean(h), true); p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	if c := s.ctx.ConfigPath; c != "" {
		c = s.followed(path.Clean(c), true)
		if p == c || p == path.Join(path.Dir(c), ".env") {
			return true
		}
	}
	return false
}

// underBerth reports whether p is berth's home, config file or the .env
// beside the config file.
func (s *scanner) underBerth(p string) bool {
	if h := s.ctx.BerthHome; h != "" {
		h = path.Clean(h)
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	if c := s.ctx.ConfigPath; c != "" {
		c = path.Clean(c)
		if p == c || p == path.Join(path.Dir(c), ".env") {
			return true
		}
	}
	return false
}

// artifactDirs are directories of regenerable build output and caches;
// removing one recursively is routine and does not need approval.
var artifactDirs = map[string]bool{
	"node_modules": true, "build": true, "dist": true, "out": true, "target": true, "_build": true,
	".cache": true, "__pycache__": true, ".pytest_cache": true, ".mypy_cache": true, ".ruff_cache": true,
	".tox": true, ".nox": true, ".venv": true, "venv": true, "coverage": true, "htmlcov": true,
	".next": true, ".nuxt": true, ".svelte-kit": true, ".angular": true, ".parcel-cache": true,
	".turbo": true, ".gradle": true, ".eggs": true, "tmp": true, ".tmp": true,
}

// routineRemoval reports whether a recursive removal of the literal word
// raw (resolved to p) is routine: a build-artifact or cache directory
// (relative to the cwd, or deep enough in an absolute path), or something
// inside /tmp or /var/tmp. Nothing with a glob at the top or a ".."
// escaping the working directory is routine.
func (s *scanner) routineRemoval(raw, p string) bool {
	if raw == "" || strings.HasPrefix(raw, "~") {
		return false
	}
	for _, tmp := range []string{"/tmp/", "/var/tmp/", "/private/tmp/"} {
		if strings.HasPrefix(p, tmp) && !MatchesAnything(path.Base(p)) {
			return true
		}
	}
	var rel string
	minIndex := 0
	if strings.HasPrefix(raw, "/") {
		minIndex = 1 // /tmp, /build: too close to the root
		rel = strings.TrimPrefix(path.Clean(raw), "/")
		if strings.Count(rel, "/") < 1 { // /build: too close to the root
			return false
		}
	} else {
		rel = path.Clean(raw)
		if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return false
		}
	}
	parts := strings.Split(rel, "/")
	for i, c := range parts {
		if i >= minIndex && (artifactDirs[c] || strings.HasSuffix(c, ".egg-info")) {
			// Everything at or below the artifact directory, reached
			// through literal components only.
			for _, above := range parts[:i] {
				if HasGlob(above) {
					return false
				}
			}
			return true
		}
	}
	return false
}
