// Package scan is berth's shell analyser: it reads an agent's command (a
// tree of internal/shparse) and reports, as findings of rules (rules.go),
// what the command does that the approval policy cares about. It decides
// nothing: the approval package turns findings into a verdict (the floor,
// approvals.deny, workspace confinement, the allowlist, the mode, the
// human's answer).
//
// # The model
//
// A command is parsed once (internal/shparse: mvdan.cc/sh, bash dialect,
// with a bound on nesting that runs before the parser) and every simple
// command in command position is checked: in pipelines, ;/&&/|| lists,
// subshells, { } blocks, if/for/while/case bodies, $(...) and backticks,
// <(...), heredocs fed to a shell, and recursively (up to 6 levels) the
// text of sh/bash/dash/zsh/ksh -c, eval, su -c, flock -c, script -c, sg
// -c, capsh -- -c, watch, trap, alias, git aliases and ssh remote
// commands. The checks are a table by program (checks.go): each family of
// programs has its checkers beside the rules they report (fs.go, disk.go,
// fetch.go, vcs.go, db.go, proc.go, shell.go, vars.go, berth.go).
//
// Wrappers are seen through with their options (wrappers.go): sudo,
// doas, pkexec, env (assignments, -i, -u, -S), exec, nohup, setsid, time,
// nice, ionice, timeout, busybox, toybox, command, builtin, xargs, chroot,
// stdbuf, taskset, chrt, nsenter, unshare, strace, ltrace, fakeroot,
// eatmydata, systemd-run, parallel (COMMAND ::: ARGS), at and batch (the
// job on stdin); a wrapper whose options cannot be told from its command
// (setpriv, bwrap, firejail, numactl ...) has every word that could start
// the command tried. A program named by a path counts as its base name
// (/bin/rm, ./mkfs.ext4); quotes and backslashes are resolved (r""m, \rm,
// "rm", $'\x72\x6d'); line continuations disappear; brace expansion is
// expanded; unquoted expansions are split at IFS. Quoted prose (echo "rm
// -rf /", grep "rm -rf") is an argument, not a command, and never matches.
//
// What the shell resolves before any program is followed too (flow.go):
// a call of a function defined in the same text (or in an earlier call:
// Context.Definitions, the session's declare -f and alias -p) is checked
// where it is
// called, its body walked with the arguments as $1 ... "$@"; an alias
// defined in the text is expanded where it is used; set --, shift, read,
// mapfile and printf -v assign the positional parameters and variables;
// exec N<<<text and exec N< <(cmd) open descriptors a later shell may read
// (bash <&N, bash /dev/fd/N); a shell or source reading <(...),
// /dev/stdin or - runs that text; printf's and echo's escapes are decoded;
// $((...)) of known numbers is computed (kill -9 $((-1))); trap bodies are
// checked where the trap is set, since they run later (EXIT, DEBUG, ERR)
// when nobody looks. For the input of a background shell, the earlier
// lines sent to it are the Prelude: their functions, variables and cd hold
// for the next line.
//
// Words that are only known at run time are handled conservatively:
//
//   - A variable assigned earlier in the same command (X=/usr; for d in a b;
//     export, local, declare) resolves to its value(s); $HOME and ~ are the
//     home directory; $PWD and relative paths resolve against the session's
//     working directory, followed through cd; ${X%pat} and its kind trim
//     known values.
//   - Any other variable or $(...) may be empty: "rm -rf $DIR/" is read as
//     "rm -rf /" (the classic accident) and is on the floor. ${DIR:?} fails
//     when empty and so counts as an unknown non-empty value; ${X:-/d} is
//     either its default or an unknown value.
//   - $(echo x), $(printf x), $(which x), $(command -v x) and $(pwd) resolve.
//   - read, mapfile and readarray fed known text (a here-string, a heredoc,
//     or <(echo x) and <(printf x): a constant command's output) assign
//     what it says, split as bash splits it. Fed anything else (a file, a
//     pipe, <(mktemp -d)) they assign unknown values, which are no floor:
//     rm -rf "$d" of such a value needs approval as any recursive removal.
//   - A program name that stays unknown ($EDITOR file, "$@", eval "$X",
//     bash -c "$X", awk's system(cmd)) needs approval (rule
//     dynamic-command): berth cannot see what runs. So does a function or
//     alias the session defined in an earlier call whose definition berth
//     does not have (Context.Names without Context.Definitions; with it,
//     a call is checked by what the definition runs, with its
//     arguments, as one defined in the same text), "$@"
//     at the top level (an earlier call may have set it), an expansion in
//     command position whose words depend on an IFS an earlier call may
//     have set, and a command_not_found_handle. Inside -c/eval text an
//     unknown part in argument position (bash -c "cd $DIR && make") does
//     not.
//   - Such a command (a function or alias of an earlier call, or a
//     program name only known at run time) is also checked against the
//     floor by what it could run: its arguments as a command line (a
//     forwarder: h rm -rf /), its arguments given to each program the
//     floor's checks cover (x -rf / as rm -rf /, f -9 -1 as kill -9 -1),
//     and its stdin, when known, as a script. Any floor finding blocks it
//     in every mode, the message naming what it could run. Arguments count
//     at their known values (an unknown part as empty, as above); floor
//     rules a program reports with no arguments (reboot), and power words
//     that are everyday words for other programs (a runlevel, -f), do not
//     count. One with more arguments than berth checks this way is
//     blocked (dynamic-unchecked).
//   - A command the parser rejects needs approval (rule unparsed) and is
//     also checked word by word, so a floor command in it is still blocked;
//     with nobody to ask, the message says what did not parse and where,
//     so a fixed command can be sent again. A nested text (sh -c TEXT)
//     nested deeper than the parser can follow is too-deep, checked the
//     same way. Past 20 000 simple commands the walk stops and the whole
//     text is read word by word, without that bound: too-deep, and the
//     floor still found.
//   - Formatting and wiping tools pointed at an unknown name count as
//     pointed at a disk.
//
// Paths are checked as written and, where the environment's files are
// this machine's (Context.Resolve, NativeResolve), where they land once
// links are followed: a write through a link to berth's home is a write to
// berth's configuration, rm -rf LINK/ removes what the link points to, and
// an operand that is or goes through a link (or, where links cannot be
// seen, ends in a slash) is never a routine removal. A link to a sensitive
// place is itself a finding (link-sensitive), and a link the command makes
// is followed by the rest of it.
//
// Code in other languages (python -c, perl -e, node -e) is not analysed,
// except for code piped in from curl/wget and code that names berth's
// configuration. The floor guards against mistakes and casual prompt
// injection; it is not a sandbox, and a determined obfuscation can get
// past it on a host backend. Untrusted agents belong on a sandboxed
// backend.
//
// # The floor
//
// rm-system-dir: recursive removal of /, a system directory (/bin /boot
// /dev /etc /home /lib* /media /mnt /opt /proc /root /run /sbin /snap /srv
// /sys /usr and its big subtrees, the multiarch library trees, kernel
// modules and firmware, /var /var/lib /var/log, the package databases
// /var/lib/dpkg /var/lib/rpm ..., /nix and the macOS /System /Library
// /Applications /Users /Volumes /private), the home directory, everything
// inside one of them (/usr/*, ~/.*), or a glob that matches one (/u*), in
// any spelling that cleans to it (//, /./, /usr/.., ../../.. from the
// working directory, cd / && rm -rf *, ${HOME%/*}), through a link, and by
// other tools: find / -delete (or -exec rm) without a test that picks some
// files, rsync --delete into one, tar --remove-files of one.
// no-preserve-root. chmod-system-dir and mv-system-dir: the same trees
// made unusable (chmod/chown/chgrp/chattr/setfacl -R, find ... -exec chmod).
// mkfs-device, disk-wipe (wipefs -a/-o, sgdisk -Z/-z/-o, blkdiscard, shred,
// parted mklabel/rm, cryptsetup luksFormat/erase, nvme format/sanitize,
// hdparm --security-erase on a device), disk-write (dd of=, >, tee, cp
// onto /dev/sd*, nvme*, vd*, xvd*, hd*, mmcblk*, dm-*, md*, loop*, nbd*,
// mapper, disk/by-*, /dev/mem), sysrq, fork-bomb (a function that calls
// itself at least twice with a call in a pipeline or in the background,
// whatever its name, functions that do so through each other, or an
// endless loop that only starts background commands), kill-all (kill with
// pid -1 in any spelling, kill of every pid $(ps -eo pid), killall5),
// power (shutdown, reboot, halt, poweroff, init/telinit 0/1/6/S, systemctl
// and loginctl poweroff/reboot/halt/kexec/suspend/hibernate ..., isolate
// of those targets, kexec -e, D-Bus calls of logind's power methods).
//
// The dangerous rules and their descriptions are listed by Rules.
//
// # Bounds
//
// A check's work is linear in the command: the text parsed (the command,
// the text of sh -c and eval, heredocs fed to a shell), the words parsed,
// the nodes walked and the values built by joining known parts all have
// budgets that grow with the command's size, and brace expansion makes at
// most 4096 words. Past a budget the command is too-large, a floor rule:
// berth could not read all of it, so it does not run through berth as it
// is. shparse refuses text past 4 MiB or 64 Ki words and operators, and
// text nested past its bound, before anything parses it.
//
// # Tests
//
// Each family of checks (a table of checks.go, or what the scanner checks
// itself) has its cases in testdata/<family>.txt: commands and the
// verdict the default policy gives them (package cases gives the format).
// A new check comes with its family's cases.
package scan
