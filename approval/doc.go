// Package approval decides, before anything reaches a backend, whether an
// agent's shell command (or a file-tool write) may run: never, only after a
// human says yes, or freely.
//
// # The model
//
// A command is parsed with mvdan.cc/sh (bash dialect) and every simple
// command in command position is checked: in pipelines, ;/&&/|| lists,
// subshells, { } blocks, if/for/while/case bodies, function bodies,
// $(...) and backticks, <(...), heredocs fed to a shell, and recursively
// (up to 6 levels) the text of sh/bash/dash/zsh/ksh -c, eval, su -c, flock
// -c, watch, trap, alias and ssh remote commands. Wrappers are seen
// through with their options: sudo (-u user ...), doas, pkexec, env
// (assignments, -i, -u, -S), exec, nohup, setsid, time, nice, ionice,
// timeout, busybox, command, builtin, xargs, chroot, stdbuf, taskset.
// A program named by a path counts as its base name (/bin/rm, ./mkfs.ext4);
// quotes and backslashes are resolved (r""m, \rm, "rm", $'\x72\x6d'); line
// continuations disappear; brace expansion is expanded. Quoted prose
// (echo "rm -rf /", grep "rm -rf") is an argument, not a command, and never
// matches.
//
// Words that are only known at run time are handled conservatively:
//
//   - A variable assigned earlier in the same command (X=/usr; for d in a b;
//     export, local, declare) resolves to its value(s); $HOME and ~ are the
//     home directory; $PWD and relative paths resolve against the session's
//     working directory, followed through cd.
//   - Any other variable or $(...) may be empty: "rm -rf $DIR/" is read as
//     "rm -rf /" (the classic accident) and is on the floor. ${DIR:?} fails
//     when empty and so counts as an unknown non-empty value; ${X:-/d} is
//     either its default or an unknown value.
//   - $(echo x), $(printf x), $(which x), $(command -v x) and $(pwd) resolve.
//   - A program name that stays unknown ($EDITOR file, "$@", eval "$X",
//     bash -c "$X") needs approval (rule dynamic-command): berth cannot see
//     what runs. Inside -c/eval text an unknown part in argument position
//     (bash -c "cd $DIR && make") does not.
//   - A command the parser rejects needs approval (rule unparsed) and is
//     also checked word by word, so a floor command in it is still blocked.
//   - Formatting and wiping tools pointed at an unknown name count as
//     pointed at a disk.
//
// Code in other languages (python -c, perl -e, node -e) is not analysed,
// except for code piped in from curl/wget. The floor guards against
// mistakes and casual prompt injection; it is not a sandbox, and a
// determined obfuscation can get past it on a host backend. Untrusted
// agents belong on a sandboxed backend.
//
// # Order of the checks
//
//  1. approvals.deny: a matching pattern blocks the command on every
//     backend, in every mode, whatever the allowlist says.
//  2. The hardline floor (rules of Level Floor): on a backend that can
//     damage the host (local, ssh, docker with host mounts: Context
//     Sandboxed false) the command is blocked in every mode, whatever the
//     allowlist says.
//  3. No rule matched: the command runs, and its result carries no
//     approval field.
//  4. A sandboxed backend (docker without host mounts, singularity, modal,
//     daytona) runs it without asking, as the reference does.
//  5. command_allowlist: when every matched rule is covered, it runs.
//  6. approvals.mode off: it runs without asking.
//  7. approvals.mode manual (the default): the Gate asks the human through
//     the Asker of the call (MCP elicitation, or a terminal prompt on an
//     interactive berth shell): once, this session, always (saved into
//     command_allowlist), or deny. No answer within approvals.timeout
//     (default 60 s) denies; no way to ask blocks with a "BLOCKED: ..."
//     message. The message speaks about the user and names no command,
//     key or value that would allow it: whatever berth prints reaches the
//     agent first, and a recipe there is an instruction to the agent.
//     smart mode (an LLM judging commands) is not supported.
//
// The agent cannot lower the gate it runs behind: writing berth's (or
// Hermes') configuration — berth config set|edit|unset, hermes config
// set, a redirection, cp, sed -i, yq -i, or code of another language that
// names the file — is write-berth-config; a nested berth that runs
// commands (berth exec|shell|mcp|serve, berth-engine ..., daemon stop, env
// rm) is nested-berth, since it obeys approvals of its own; setting,
// exporting or unsetting BERTH_APPROVALS_*, BERTH_CONFIG, BERTH_HOME,
// BERTH_OWNER, BERTH_PARENT_POLICY or BERTH_NO_DAEMON is berth-env. All
// three are asked in manual mode. In mode off the user has chosen to run
// every dangerous command unasked, these included; "rule:write-berth-config"
// (or the other two) in approvals.deny refuses them in every mode.
//
// # The floor
//
// rm-system-dir: recursive removal of /, a system directory (/bin /boot
// /dev /etc /home /lib* /media /mnt /opt /proc /root /run /sbin /snap /srv
// /sys /usr and its big subtrees /var /var/lib /var/log /nix and the macOS
// /System /Library /Applications /Users /Volumes /private), the home
// directory, everything inside one of them (/usr/*, ~/.*), or a glob that
// matches one (/u*), in any spelling that cleans to it (//, /./, /usr/..,
// ../../.. from the working directory, cd / && rm -rf *). no-preserve-root.
// chmod-system-dir and mv-system-dir: the same trees made unusable.
// mkfs-device, disk-wipe (wipefs -a/-o, sgdisk -Z/-z/-o, blkdiscard, shred
// or parted mklabel/rm on a device), disk-write (dd of=, >, tee, cp onto
// /dev/sd*, nvme*, vd*, xvd*, hd*, mmcblk*, dm-*, md*, loop*, nbd*, mapper,
// disk/by-*, /dev/mem), sysrq, fork-bomb (a function that calls itself at
// least twice with a call in a pipeline or in the background, whatever its
// name), kill-all (kill with pid -1, killall5), power (shutdown, reboot,
// halt, poweroff, init/telinit 0/1/6/S, systemctl poweroff/reboot/halt/
// kexec/rescue/emergency/suspend/hibernate and isolate of those targets).
//
// The dangerous rules and their descriptions are listed by Rules.
//
// # Patterns
//
// approvals.deny and command_allowlist hold Patterns: "rule:ID" for every
// finding of a rule, or a glob over each normalized simple command (see
// Pattern and Finding.Command). A malformed pattern is a configuration
// error naming the key, the index and the pattern.
package approval
