package scan

import (
	"strings"
)

// diskChecks are the tools that format, wipe or write raw disks.
func diskChecks() map[string]check {
	mkfs := check{[]string{"mkfs-device"}, func(s *scanner, c call) { s.mkfs(c.args, c.seg) }}
	return map[string]check{
		"mkfs": mkfs, "mke2fs": mkfs, "mkswap": mkfs, "mkdosfs": mkfs, "mkntfs": mkfs, "mkexfatfs": mkfs, "mkvfat": mkfs,
		"dd": {append([]string{"dd-if"}, writeRules...), func(s *scanner, c call) {
			for _, a := range c.args {
				v := a.first()
				switch {
				case strings.HasPrefix(v, "of="):
					s.writeTarget(suffix(a, 3), c.seg)
				case strings.HasPrefix(v, "if="):
					s.add("dd-if", c.seg, v[3:])
				}
			}
		}},
		"shred": {append([]string{"disk-wipe"}, writeRules...), func(s *scanner, c call) {
			for _, t := range parseOpts(c.args, "ns", []string{"iterations", "size", "random-source"}, true).operands {
				if s.deviceArg(t) {
					at, located := s.targetsOf(t)
					s.addAt("disk-wipe", c.seg, t.show(), at, located)
				} else {
					s.writeTarget(t, c.seg)
				}
			}
		}},
		"wipefs": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			o := parseOpts(c.args, "oOt", []string{"offset", "output", "types", "backup"}, true)
			if (o.has('a') || o.hasLong("all") || o.has('o') || o.hasLong("offset")) && !o.has('n') && !o.hasLong("no-act") {
				s.devices(o.operands, "disk-wipe", c.seg)
			}
		}},
		"sgdisk": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			zap := false
			for _, a := range c.args {
				v := a.first()
				if v == "--zap-all" || v == "--zap" || v == "--clear" {
					zap = true
				}
				if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Trim(v[1:], "Zzo") == "" {
					zap = true
				}
			}
			if zap {
				s.devices(operandsOnly(c.args), "disk-wipe", c.seg)
			}
		}},
		"blkdiscard": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			s.devices(parseOpts(c.args, "olps", []string{"offset", "length", "step"}, true).operands, "disk-wipe", c.seg)
		}},
		"parted": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			for _, a := range c.args {
				switch strings.ToLower(a.first()) {
				case "mklabel", "mktable", "rm", "mkpart", "resizepart":
					s.devices(operandsOnly(c.args), "disk-wipe", c.seg)
					return
				}
			}
		}},
		// cryptsetup luksFormat (and erase) overwrites the device's header:
		// its data is gone.
		"cryptsetup": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			o := parseOpts(c.args, "chsdStTiMlIbop", []string{"cipher", "hash", "key-size", "key-file", "key-slot", "type", "header", "pbkdf", "iter-time", "label", "subsystem", "uuid", "offset", "skip", "sector-size", "keyfile-size", "keyfile-offset", "new-keyfile-size", "luks2-metadata-size", "luks2-keyslots-size", "integrity", "timeout", "tries", "token-id", "token-type", "pbkdf-memory", "pbkdf-parallel", "resilience", "hotzone-size", "device-size", "reduce-device-size", "master-key-file", "volume-key-file", "debug-json"}, true)
			if len(o.operands) < 2 {
				return
			}
			switch strings.ToLower(o.operands[0].first()) {
			case "luksformat", "erase", "lukserase", "reencrypt":
				s.devices(o.operands[1:2], "disk-wipe", c.seg)
			}
		}},
		"nvme": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			if len(c.args) > 0 {
				switch c.args[0].first() {
				case "format", "sanitize", "delete-ns", "write-zeroes", "dsm":
					s.devices(operandsOnly(c.args[1:]), "disk-wipe", c.seg)
				}
			}
		}},
		"hdparm": {[]string{"disk-wipe"}, func(s *scanner, c call) {
			for _, a := range c.args {
				switch v := a.first(); {
				case strings.HasPrefix(v, "--security-erase"), strings.HasPrefix(v, "--trim-sector-ranges"), v == "--write-sector", v == "--make-bad-sector", v == "--dco-restore", v == "--security-set-pass":
					s.devices(operandsOnly(c.args), "disk-wipe", c.seg)
					return
				}
			}
		}},
		"sfdisk": {[]string{"disk-wipe"}, partitionTable},
		"fdisk":  {[]string{"disk-wipe"}, partitionTable},
	}
}

// partitionTable checks sfdisk and fdisk: anything but a listing rewrites
// the partition table of the device.
func partitionTable(s *scanner, c call) {
	for _, a := range c.args {
		switch a.first() {
		case "-l", "--list", "-d", "--dump", "-V", "--verify", "-s", "--show-size", "-g", "--show-geometry", "-J", "--json", "-h", "--help":
			return
		}
	}
	if c.name == "fdisk" && c.io.stdinText == nil && len(c.io.up) == 0 && !c.io.stdinFile {
		return // interactive: the agent's stdin is empty
	}
	s.devices(operandsOnly(c.args), "disk-wipe", c.seg)
}

// mkfs checks the formatting tools: a device (or a name only known at run
// time) as target is on the floor; an image file is fine.
func (s *scanner) mkfs(args []arg, seg string) {
	valued := map[string]bool{"-L": true, "-n": true, "-U": true, "-t": true, "-T": true, "-O": true, "-E": true,
		"-b": true, "-N": true, "-I": true, "-m": true, "-d": true, "-l": true, "-r": true, "-s": true, "-i": true,
		"-C": true, "-g": true, "-G": true, "-e": true, "-o": true, "--label": true, "--type": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		if valued[v] {
			if i+1 < len(args) && s.deviceArg(args[i+1]) && !args[i+1].dyn {
				at, located := s.targetsOf(args[i+1])
				s.addAt("mkfs-device", seg, args[i+1].show(), at, located)
				return
			}
			i++
			continue
		}
		if strings.HasPrefix(v, "-") && !a.dyn {
			continue
		}
		if s.deviceArg(a) {
			at, located := s.targetsOf(a)
			s.addAt("mkfs-device", seg, a.show(), at, located)
			return
		}
	}
}
