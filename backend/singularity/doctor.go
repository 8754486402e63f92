package singularity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Doctor reports whether the backend can work here: the executable and
// its version, the scratch directory, the overlay kind, the image (built
// yet or not), and — probed with a one-shot `apptainer exec` when the image
// is at hand — whether the cpu and memory limits and `--network none` are
// enforced. A limit that is not is listed in Details.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := settingsFrom(opts)
	if err != nil {
		return backend.Fingerprint{Usable: false, Summary: err.Error(), Fix: "fix the setting named above"}
	}
	bin, err := findBinary(s.binary)
	if err != nil {
		var ue *backend.UnreachableError
		fix := "install Apptainer"
		if errors.As(err, &ue) {
			fix = ue.Hint
		}
		return backend.Fingerprint{Usable: false, Summary: err.Error(), Fix: fix}
	}
	c := &cli{bin: bin}
	v, err := c.version(ctx)
	if err != nil {
		return backend.Fingerprint{Usable: false, Summary: fmt.Sprintf("%s does not run: %v", bin, err), Fix: "check the Apptainer installation (`" + bin + " version`)"}
	}
	fp := backend.Fingerprint{Usable: true, Summary: fmt.Sprintf("%s %s", filepath.Base(bin), v)}
	add := func(format string, args ...any) { fp.Details = append(fp.Details, fmt.Sprintf(format, args...)) }
	add("executable: %s", bin)
	if len(s.kept) == 0 {
		add("berth's home and config: outside every host directory bound writable into the instance (singularity_binds, docker_mount_cwd_to_workspace): out of the commands' reach")
	}
	for _, k := range s.kept {
		if k.readOnly {
			add("%s (berth's own settings) lies in a host directory bound writable into the instance: kept read-only there (at %s) by a nested read-only bind", k.host, k.target)
		}
	}
	add("scratch: %s (overlays, instance records, build temporary files)", s.scratch)
	if s.persistent {
		mode, why := overlayChoice(s.overlay)
		add("persistent overlay: %s (%s)", mode, why)
	} else {
		add("container_persistent is false: --writable-tmpfs, writes are lost when the instance stops")
	}

	image := ""
	if isReference(s.image) {
		p := s.cachedSIFPath(s.image)
		if _, err := os.Stat(p); err == nil {
			image = p
			add("image: %s, built into %s", s.image, p)
		} else {
			add("image: %s is built into %s on first use (minutes; progress in the log)", s.image, p)
		}
	} else if abs, err := filepath.Abs(s.image); err == nil {
		if _, err := os.Stat(abs); err != nil {
			fp.Usable = false
			fp.Fix = "set terminal.singularity_image to an existing .sif file, sandbox directory, or a docker:// reference"
			add("image: %s: %v", abs, err)
		} else {
			image = abs
			add("image: %s", abs)
		}
	}

	if s.cpus > 0 || s.memoryMB > 0 {
		if st := limitsFor(bin); st.known {
			reportProbe(add, s, st.enforced, st.reason)
		} else if image != "" {
			args := []string{"exec", "--containall", "--no-home"}
			if s.cpus > 0 {
				args = append(args, "--cpus", strconv.FormatFloat(s.cpus, 'f', -1, 64))
			}
			if s.memoryMB > 0 {
				args = append(args, "--memory", strconv.Itoa(s.memoryMB)+"M")
			}
			_, err := c.run(ctx, nil, append(args, image, "/bin/sh", "-c", "true")...)
			var ce *cliError
			switch {
			case err == nil:
				reportProbe(add, s, true, "")
			case errors.As(err, &ce) && isCgroupRefusal(ce):
				reportProbe(add, s, false, ce.fatal())
			default:
				add("limits: probe failed: %v", err)
			}
		} else {
			add("limits: container_cpu=%g, container_memory=%dMB are probed at the first instance start (the image is not built yet)", s.cpus, s.memoryMB)
		}
	}
	if s.diskMB > 0 {
		if mode, _ := overlayChoice(s.overlay); s.persistent && mode == overlayImage {
			add("limit enforced: container_disk=%dMB (the size of the ext3 overlay image)", s.diskMB)
		} else {
			add("limit NOT enforced: container_disk=%dMB (a directory overlay or tmpfs has no size limit; singularity_overlay: image makes a sized overlay)", s.diskMB)
		}
	}
	if !s.network && image != "" {
		_, err := c.run(ctx, nil, "exec", "--containall", "--no-home", "--net", "--network", "none", image, "/bin/sh", "-c", "true")
		var ce *cliError
		if err == nil {
			add("docker_network=false: --network none works")
		} else if errors.As(err, &ce) {
			fp.Usable = false
			fp.Fix = "ask the administrator to allow `--network none` for users, or set docker_network: true"
			add("docker_network=false: Apptainer refuses --network none: %s", ce.fatal())
		}
	}
	return fp
}

func reportProbe(add func(string, ...any), s *settings, enforced bool, reason string) {
	if enforced {
		add("limits enforced: container_cpu=%g, container_memory=%dMB", s.cpus, s.memoryMB)
		return
	}
	if s.cpus > 0 {
		add("limit NOT enforced: container_cpu=%g (%s)", s.cpus, reason)
	}
	if s.memoryMB > 0 {
		add("limit NOT enforced: container_memory=%dMB (%s)", s.memoryMB, reason)
	}
}
