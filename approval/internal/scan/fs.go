package scan

import (
	"path"
	"strings"
)

// fsChecks are the programs that remove, move, copy, change permissions
// of or edit files, and cd, which moves the working directory the paths of
// the commands after it are read from.
func fsChecks() map[string]check {
	rm := check{append([]string{"rm-system-dir", "no-preserve-root", "rm-recursive", "xargs-rm"}, writeRules...), func(s *scanner, c call) {
		s.rm(c.name, c.args, c.io, c.seg)
	}}
	perm := check{[]string{"chmod-system-dir", "no-preserve-root", "chmod-world-writable", "chmod-recursive", "chown-recursive-root"}, func(s *scanner, c call) {
		s.chperm(c.name, c.args, c.seg)
	}}
	copies := check{writeRules, func(s *scanner, c call) { s.copyLike(c.name, c.args, c.seg) }}
	cd := check{nil, func(s *scanner, c call) { s.cd(c.args) }}
	extract := check{writeRules, func(s *scanner, c call) { s.extract(c.name, c.args, c.seg) }}
	writes := func(shortVal string, longVal ...string) check {
		return check{writeRules, func(s *scanner, c call) {
			for _, t := range parseOpts(c.args, shortVal, longVal, true).operands {
				s.writeTarget(t, c.seg)
			}
		}}
	}
	return map[string]check{
		"cd": cd, "pushd": cd,
		"rm": rm, "unlink": rm,
		"chmod": perm, "chown": perm, "chgrp": perm,
		"mv": {append([]string{"mv-system-dir"}, writeRules...), func(s *scanner, c call) { s.mv(c.args, c.seg) }},
		"cp": copies, "install": copies,
		"rsync": {append([]string{"rm-system-dir", "rm-recursive"}, writeRules...), func(s *scanner, c call) {
			s.rsync(c.args, c.seg)
			s.copyLike(c.name, c.args, c.seg)
		}},
		"chattr":  {[]string{"chmod-system-dir"}, func(s *scanner, c call) { s.attrs(c.name, c.args, c.seg) }},
		"setfacl": {[]string{"chmod-system-dir"}, func(s *scanner, c call) { s.attrs(c.name, c.args, c.seg) }},
		"ln": {append([]string{"link-sensitive"}, writeRules...), func(s *scanner, c call) {
			s.link(c.args, c.seg)
			s.copyLike(c.name, c.args, c.seg)
		}},
		"tee":      writes(""),
		"truncate": writes("sr", "size", "reference"),
		"touch":    writes("dtr", "date", "reference", "time"),
		"sed":      {writeRules, func(s *scanner, c call) { s.sed(c.args, c.seg) }},
		"tar": {append([]string{"rm-system-dir", "rm-recursive"}, writeRules...), func(s *scanner, c call) {
			s.tarRemove(c.args, c.seg)
			s.extract(c.name, c.args, c.seg)
		}},
		"unzip":  extract,
		"find":   {[]string{"find-delete", "rm-system-dir", "chmod-system-dir"}, func(s *scanner, c call) { s.find(c.args, c.seg) }},
		"yq":     {writeRules, func(s *scanner, c call) { s.yq(c.args, c.seg) }},
		"sponge": writes(""),
	}
}

// link checks ln: a link (symbolic or hard) to a sensitive place lets a
// later write or removal through the link reach it (ln -sfn ~ build; rm
// -rf build/).
func (s *scanner) link(args []arg, seg string) {
	o := parseOpts(args, "tS", []string{"target-directory", "suffix"}, true)
	targets := o.operands
	dir := ""
	if t, ok := o.val('t'); ok {
		dir = t.first()
	} else if t, ok := o.longVal("target-directory"); ok {
		dir = t.first()
	} else if len(targets) >= 2 {
		dir = path.Dir(targets[len(targets)-1].first())
		targets = targets[:len(targets)-1]
	}
	symbolic := o.has('s') || o.hasLong("symbolic")
	if symbolic && len(targets) == 1 {
		// Remember the link, so that the rest of the command sees through it.
		link := dir
		if _, ok := o.val('t'); !ok && len(o.operands) >= 2 {
			link = o.operands[len(o.operands)-1].first()
		} else {
			link = path.Join(dir, path.Base(targets[0].first()))
		}
		if dir == "" {
			link = path.Base(targets[0].first())
		}
		lp, labs := s.resolvePath(link)
		tp, tabs := s.resolvePath(targets[0].first())
		if !strings.HasPrefix(targets[0].first(), "/") && !strings.HasPrefix(targets[0].first(), "~") && labs {
			tp, tabs = s.resolvePath(path.Join(path.Dir(lp), targets[0].first()))
		}
		if labs && tabs && len(s.made) < 64 {
			s.made[lp] = tp
			delete(s.links, lp)
			for k := range s.links {
				if strings.HasPrefix(k, lp+"/") {
					delete(s.links, k)
				}
			}
		}
	}
	for _, t := range targets {
		for _, v := range t.vals {
			if v == "" {
				continue
			}
			candidates := []string{v}
			if symbolic && !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "~") && dir != "" {
				candidates = append(candidates, path.Join(dir, v)) // relative to the link
			}
			for _, c := range candidates {
				p, abs := s.resolvePath(c)
				if !abs {
					continue
				}
				for _, q := range []string{p, s.followed(p, abs)} {
					if s.isFloorTree(q) || s.sensitiveWrite(q) != "" {
						s.addAt("link-sensitive", seg, q, []string{s.followed(p, abs)}, true)
					}
				}
			}
		}
	}
}

// yq checks yq -i (--inplace): the files after the expression are edited
// in place.
func (s *scanner) yq(args []arg, seg string) {
	o := parseOpts(args, "ICoOpPs", []string{"indent", "output-format", "input-format", "expression", "from-file", "split-exp"}, true)
	if !o.has('i') && !o.hasLong("inplace") && !o.hasLong("in-place") {
		return
	}
	files := o.operands
	if len(files) > 0 {
		switch files[0].first() {
		case "eval", "e", "eval-all", "ea":
			files = files[1:]
		}
	}
	if _, ok := o.longVal("expression"); !ok && !o.hasLong("from-file") && len(files) > 0 {
		files = files[1:]
	}
	for _, f := range files {
		s.writeTarget(f, seg)
	}
}

// cd follows the working directory through the command.
func (s *scanner) cd(args []arg) {
	o := parseOpts(args, "", nil, false)
	if len(o.operands) == 0 {
		if s.ctx.Home != "" {
			s.cwd = path.Clean(s.ctx.Home)
		} else {
			s.cwd = homeMark
		}
		return
	}
	v, ok := o.operands[0].lit()
	if !ok || v == "-" || strings.HasPrefix(v, "+") {
		s.cwd = ""
		return
	}
	p, abs := s.localPath(v) // the directory as the shell there names it
	p = path.Clean(p)
	if !abs {
		s.cwd = ""
		return
	}
	s.cwd = p
}

// rm checks rm and unlink.
func (s *scanner) rm(name string, args []arg, io ioInfo, seg string) {
	o := parseOpts(args, "", nil, true)
	rec := o.has('r') || o.has('R') || o.hasLong("recursive")
	if o.hasLong("no-preserve-root") {
		s.add("no-preserve-root", seg, "")
	}
	routine := len(o.operands) > 0 && !io.xargs
	at, located := s.targetsOf(o.operands...)
	for _, t := range o.operands {
		lit, isLit := t.lit()
		if !isLit {
			routine = false
		}
		for _, v := range t.vals {
			if v == "" {
				continue
			}
			p, abs := s.resolvePath(v)
			r := s.operandFollowed(v, p, abs)
			if rec && abs && s.isFloorTree(p) {
				s.addAt("rm-system-dir", seg, p, at, located)
			}
			if rec && r != p && s.isFloorTree(r) {
				s.addAt("rm-system-dir", seg, p+" (a link to "+r+")", at, located)
			}
			for _, q := range []string{p, r} {
				if id := s.sensitiveWrite(q); id != "" && mustRule(id).Level == Dangerous {
					s.addAt(id, seg, q, []string{r}, abs)
				}
			}
			// rm -r LINK/ empties the link's target: an operand that is
			// (or goes through) a link is never routine, nor, where links
			// cannot be seen, one that ends in a slash.
			if isLit && (!s.routineRemoval(lit, p) || s.isLink(p, abs) || s.ctx.Resolve == nil && strings.HasSuffix(lit, "/")) {
				routine = false
			}
		}
	}
	if rec && !routine && (len(o.operands) > 0 || io.xargs) { // rm -rf alone removes nothing
		s.addAt("rm-recursive", seg, "", at, located && !io.xargs)
	}
	if io.xargs && name == "rm" {
		s.add("xargs-rm", seg, "")
	}
}

// chperm checks chmod, chown and chgrp.
func (s *scanner) chperm(name string, args []arg, seg string) {
	rec, noPreserve, reference := false, false, false
	var operands []arg
	ended := false
	for _, a := range args {
		v := a.first()
		switch {
		case ended:
			operands = append(operands, a)
		case v == "--":
			ended = true
		case strings.HasPrefix(v, "--"):
			switch {
			case v == "--recursive":
				rec = true
			case v == "--no-preserve-root":
				noPreserve = true
			case strings.HasPrefix(v, "--reference"):
				reference = true
			}
		case len(v) > 1 && v[0] == '-' && (name != "chmod" || strings.Trim(v[1:], "cfvRhHLP") == ""):
			if strings.Contains(v, "R") {
				rec = true
			}
		default:
			operands = append(operands, a)
		}
	}
	if noPreserve {
		s.add("no-preserve-root", seg, "")
	}
	var spec arg
	targets := operands
	if !reference && len(operands) > 0 {
		spec, targets = operands[0], operands[1:]
	}
	at, located := s.targetsOf(targets...)
	if rec {
		for _, t := range targets {
			for _, v := range t.vals {
				if p, abs := s.resolvePath(v); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) {
					s.addAt("chmod-system-dir", seg, p, at, located)
				}
			}
		}
	}
	switch name {
	case "chmod":
		if !reference && worldWritable(spec.first()) {
			s.addAt("chmod-world-writable", seg, spec.first(), at, located)
		}
		if rec {
			s.addAt("chmod-recursive", seg, "", at, located)
		}
	case "chown":
		owner := spec.first()
		if i := strings.IndexAny(owner, ":."); i >= 0 {
			owner = owner[:i]
		}
		if rec && !reference && (owner == "root" || owner == "0") {
			s.addAt("chown-recursive-root", seg, spec.first(), at, located)
		}
	}
}

// worldWritable reports whether a chmod mode gives others write access.
func worldWritable(mode string) bool {
	if mode == "" {
		return false
	}
	if strings.Trim(mode, "01234567") == "" {
		return len(mode) >= 3 && (mode[len(mode)-1]-'0')&2 != 0
	}
	for _, clause := range strings.Split(mode, ",") {
		who := strings.TrimLeft(clause, "ugoa")
		whoPart := clause[:len(clause)-len(who)]
		if !strings.ContainsAny(whoPart, "oa") {
			continue
		}
		// who is now ops and perms: [+-=]perms...
		op := byte(0)
		for i := 0; i < len(who); i++ {
			c := who[i]
			switch {
			case c == '+' || c == '-' || c == '=':
				op = c
			case c == 'w' && (op == '+' || op == '='):
				return true
			}
		}
	}
	return false
}

// mv checks mv: moving a system directory away is on the floor; its sources
// and destination are writes.
func (s *scanner) mv(args []arg, seg string) {
	o := parseOpts(args, "tS", []string{"target-directory", "suffix"}, true)
	sources := o.operands
	var dest []arg
	if t, ok := o.val('t'); ok {
		dest = []arg{t}
	} else if t, ok := o.longVal("target-directory"); ok {
		dest = []arg{t}
	} else if len(sources) >= 2 {
		dest = sources[len(sources)-1:]
		sources = sources[:len(sources)-1]
	} else {
		// mv with one operand and no target moves nothing: it stops with
		// "missing destination file operand".
		sources = nil
	}
	for _, src := range sources {
		for _, v := range src.vals {
			if p, abs := s.resolvePath(v); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) {
				at, located := s.targetsOf(src)
				s.addAt("mv-system-dir", seg, p, at, located)
			}
		}
		s.writeTarget(src, seg)
	}
	for _, d := range dest {
		s.writeTarget(d, seg)
		s.intoDir(d, sources, seg)
	}
}

// intoDir checks dest/base(source) for each source, for copies into a
// directory (cp .bashrc ~).
func (s *scanner) intoDir(dest arg, sources []arg, seg string) {
	for _, src := range sources {
		b := path.Base(src.first())
		if b == "" || b == "." || b == "/" {
			continue
		}
		for _, v := range dest.vals {
			if v != "" {
				s.writeTarget(litArg(strings.TrimSuffix(v, "/")+"/"+b), seg)
			}
		}
	}
}

// copyLike checks cp, install, ln and rsync destinations.
func (s *scanner) copyLike(name string, args []arg, seg string) {
	shortVal := "tS"
	if name == "install" {
		shortVal = "tSmog"
	}
	if name == "rsync" {
		shortVal = "eTfB"
	}
	o := parseOpts(args, shortVal, []string{"target-directory", "suffix", "mode", "owner", "group", "rsh", "temp-dir", "filter", "exclude", "include", "files-from", "backup-dir", "partial-dir"}, true)
	if name == "install" && o.has('d') {
		for _, t := range o.operands {
			s.writeTarget(t, seg)
		}
		return
	}
	sources := o.operands
	var dest arg
	if t, ok := o.val('t'); ok && name != "rsync" {
		dest = t
	} else if t, ok := o.longVal("target-directory"); ok {
		dest = t
	} else if len(sources) >= 2 {
		dest = sources[len(sources)-1]
		sources = sources[:len(sources)-1]
	} else {
		return
	}
	if name == "rsync" && s.remoteWrite(dest, seg, false) {
		return // a write there
	}
	s.writeTarget(dest, seg)
	s.intoDir(dest, sources, seg)
	if len(sources) == 1 {
		s.copied(sources[0], dest, false)
		s.copied(sources[0], dest, true)
	}
}

// sed checks sed -i: the files it edits are writes.
func (s *scanner) sed(args []arg, seg string) {
	inPlace, scriptGiven := false, false
	var operands []arg
	for i := 0; i < len(args); i++ {
		v := args[i].first()
		switch {
		case v == "--in-place" || strings.HasPrefix(v, "--in-place="):
			inPlace = true
		case v == "--expression" || v == "--file":
			scriptGiven = true
			i++
		case strings.HasPrefix(v, "--expression=") || strings.HasPrefix(v, "--file="):
			scriptGiven = true
		case strings.HasPrefix(v, "--"):
		case len(v) > 1 && v[0] == '-':
		cluster:
			for j := 1; j < len(v); j++ {
				switch v[j] {
				case 'i':
					inPlace = true
					break cluster
				case 'e', 'f':
					scriptGiven = true
					if j == len(v)-1 {
						i++
					}
					break cluster
				case 'l':
					if j == len(v)-1 {
						i++
					}
					break cluster
				}
			}
		default:
			operands = append(operands, args[i])
		}
	}
	if !inPlace {
		return
	}
	if !scriptGiven && len(operands) > 0 {
		operands = operands[1:]
	}
	for _, f := range operands {
		s.writeTarget(f, seg)
	}
}

// extract checks where tar -x and unzip put files.
func (s *scanner) extract(name string, args []arg, seg string) {
	var dir *arg
	extracting := name == "unzip"
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		switch {
		case name == "tar" && i == 0 && !strings.HasPrefix(v, "-") && strings.Contains(v, "x"):
			extracting = true
		case name == "tar" && (v == "--extract" || v == "--get"):
			extracting = true
		case name == "tar" && (v == "-C" || v == "--directory") && i+1 < len(args):
			i++
			dir = &args[i]
		case name == "tar" && strings.HasPrefix(v, "--directory="):
			d := suffix(a, len("--directory="))
			dir = &d
		case name == "unzip" && v == "-d" && i+1 < len(args):
			i++
			dir = &args[i]
		case name == "tar" && len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Contains(v, "x"):
			extracting = true
		}
	}
	if !extracting {
		return
	}
	if dir == nil {
		d := litArg(".")
		dir = &d
	}
	s.writeTarget(*dir, seg)
}

// find checks -delete and -exec rm, and checks the -exec command itself.
//
// find walks its start paths: deleting (or changing the mode of) what it
// finds under / or a system directory (find / -delete, find ~ -exec rm -rf
// {} +, find / -type f -exec chmod 000 {} +) is the floor.
func (s *scanner) find(args []arg, seg string) {
	var floorStart string // a start path that is a floor tree
	i := 0
	for ; i < len(args); i++ { // options, then start paths, then the expression
		v := args[i].first()
		if v == "-H" || v == "-L" || v == "-P" || strings.HasPrefix(v, "-O") || v == "-D" {
			if v == "-D" {
				i++
			}
			continue
		}
		break
	}
	for ; i < len(args); i++ {
		v := args[i].first()
		if strings.HasPrefix(v, "-") || v == "(" || v == "!" || v == "," {
			break
		}
		for _, val := range args[i].vals {
			if p, abs := s.resolvePath(val); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) && floorStart == "" {
				floorStart = p
			}
		}
	}
	// A test that picks some files (-name '*.log', -mtime +7) makes it a
	// selection, which is dangerous but no floor; -type f picks them all.
	for j := i; j < len(args) && floorStart != ""; j++ {
		if selectiveFindTest(args[j].first(), args[j+1:]) {
			floorStart = ""
		}
	}
	for ; i < len(args); i++ {
		switch args[i].first() {
		case "-delete":
			s.add("find-delete", seg, "-delete")
			if floorStart != "" {
				s.addAt("rm-system-dir", seg, "find "+floorStart+" -delete", []string{s.followed(floorStart, true)}, true)
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j].first() != ";" && args[j].first() != "+" {
				j++
			}
			inner := args[i+1 : j]
			if len(inner) > 0 {
				name, _ := s.innerName(inner)
				switch name {
				case "rm", "shred", "unlink":
					s.add("find-delete", seg, "-exec "+name)
					if floorStart != "" {
						s.addAt("rm-system-dir", seg, "find "+floorStart+" -exec "+name, []string{s.followed(floorStart, true)}, true)
					}
				case "chmod", "chown", "chgrp", "chattr", "setfacl":
					if floorStart != "" {
						s.addAt("chmod-system-dir", seg, "find "+floorStart+" -exec "+name, []string{s.followed(floorStart, true)}, true)
					}
				}
				s.command(inner, ioInfo{}, "")
			}
			i = j
		}
	}
}

// selectiveFindTest reports whether a find test picks only some files: a
// name, path or regex that does not match everything, times, sizes,
// owners, permissions, emptiness.
func selectiveFindTest(test string, rest []arg) bool {
	switch test {
	case "-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex", "-lname", "-ilname":
		return len(rest) > 0 && !MatchesAnything(rest[0].first()) && rest[0].first() != ".*"
	case "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-newer", "-anewer", "-cnewer", "-newermt", "-newerct",
		"-size", "-user", "-group", "-uid", "-gid", "-nouser", "-nogroup", "-perm", "-empty", "-inum", "-links", "-samefile", "-used":
		return true
	}
	return false
}

// rsync checks rsync --delete: it removes whatever in the destination the
// source does not have, so an empty source empties it (rsync -a --delete
// empty/ /).
func (s *scanner) rsync(args []arg, seg string) {
	del := false
	for _, a := range args {
		// rsync takes unique prefixes of long options: every prefix of
		// --delete from --del on, and of --remove-source-files from
		// --remov on, deletes.
		name, _, _ := strings.Cut(a.first(), "=")
		if len(name) >= len("--del") && strings.HasPrefix("--delete", name) || strings.HasPrefix(name, "--delete") ||
			len(name) >= len("--remov") && strings.HasPrefix("--remove-source-files", name) {
			del = true
		}
	}
	o := parseOpts(args, "eTfB", []string{"rsh", "temp-dir", "filter", "exclude", "include", "files-from", "backup-dir", "partial-dir", "rsync-path", "log-file", "password-file", "chown", "chmod", "usermap", "groupmap", "compare-dest", "copy-dest", "link-dest", "suffix", "max-delete", "max-size", "min-size", "timeout", "contimeout", "bwlimit", "sockopts", "out-format", "port", "address", "iconv", "checksum-choice", "compress-choice"}, true)
	if !del || len(o.operands) < 2 {
		return
	}
	dest := o.operands[len(o.operands)-1]
	if _, _, remote := remoteSpec(dest.first()); remote {
		s.remoteWrite(dest, seg, true) // it deletes there
		return
	}
	for _, v := range dest.vals {
		at, located := s.targetsOf(litArg(v))
		if p, abs := s.resolvePath(v); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) {
			s.addAt("rm-system-dir", seg, "rsync --delete into "+p, at, located)
		} else {
			s.addAt("rm-recursive", seg, "rsync --delete", at, located && !dest.dyn)
		}
	}
}

// tarRemove checks tar --remove-files: it deletes what it archives.
func (s *scanner) tarRemove(args []arg, seg string) {
	remove := false
	for _, a := range args {
		if a.first() == "--remove-files" {
			remove = true
		}
	}
	if !remove {
		return
	}
	o := parseOpts(args, "fCTXbHKLNVgF", []string{"file", "directory", "files-from", "exclude-from", "exclude", "blocking-factor", "format", "owner", "group", "mode", "mtime", "newer", "label", "use-compress-program", "transform", "xform", "volno-file", "info-script", "new-volume-script", "rsh-command", "backup", "suffix", "tape-length", "record-size", "occurrence", "sort", "checkpoint", "checkpoint-action", "quoting-style", "warning", "level", "listed-incremental", "after-date", "newer-mtime", "pax-option", "hole-detection", "atime-preserve"}, true)
	operands := o.operands
	if len(operands) > 0 && !strings.HasPrefix(args[0].first(), "-") {
		operands = operands[1:] // tar cf ARCHIVE ...: the first word was the options
	}
	at, located := s.targetsOf(operands...)
	for _, t := range operands {
		for _, v := range t.vals {
			if p, abs := s.resolvePath(v); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) {
				s.addAt("rm-system-dir", seg, "tar --remove-files "+p, at, located)
			}
		}
	}
	s.addAt("rm-recursive", seg, "tar --remove-files", at, located)
}

// attrs checks chattr and setfacl: a recursive change of / or a system
// directory (chattr -R +i /, setfacl -R -m u:nobody:rwx /) breaks the
// system as chmod -R does.
func (s *scanner) attrs(name string, args []arg, seg string) {
	rec := false
	var targets []arg
	for i := 0; i < len(args); i++ {
		v := args[i].first()
		switch {
		case v == "-R" || v == "--recursive" || strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--") && strings.Contains(v[1:], "R") && name == "chattr":
			rec = true
		case name == "setfacl" && strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--") && strings.Contains(v, "R"):
			rec = true
			if strings.ContainsAny(v, "mMxX") {
				i++ // the ACL spec or file follows
			}
		case name == "setfacl" && (v == "-m" || v == "-M" || v == "-x" || v == "-X" || v == "--modify" || v == "--remove" || v == "--set" || v == "--set-file" || v == "--modify-file" || v == "--remove-file"):
			i++
		case name == "chattr" && (strings.HasPrefix(v, "+") || strings.HasPrefix(v, "=") || v == "-v" || v == "-p"):
			if v == "-v" || v == "-p" {
				i++
			}
		case strings.HasPrefix(v, "-") && len(v) > 1:
		default:
			targets = append(targets, args[i])
		}
	}
	if !rec {
		return
	}
	at, located := s.targetsOf(targets...)
	for _, t := range targets {
		for _, v := range t.vals {
			if p, abs := s.resolvePath(v); abs && (s.isFloorTree(p) || s.isFloorTree(s.followed(p, abs))) {
				s.addAt("chmod-system-dir", seg, name+" -R "+p, at, located)
			}
		}
	}
}

// perlInPlace checks perl -i: the files it edits are writes.
func (s *scanner) perlInPlace(args []arg, seg string) {
	o := parseOpts(args, "eEIMmlx", nil, true)
	if !o.has('i') {
		return
	}
	files := o.operands
	if !o.has('e') && !o.has('E') && len(files) > 0 {
		files = files[1:]
	}
	for _, f := range files {
		s.writeTarget(f, seg)
	}
}
