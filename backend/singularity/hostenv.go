package singularity

import "strings"

// hostEnv is the environment berth gives the apptainer executable: what
// Apptainer itself reads, and nothing of berth's own environment (provider
// keys, tokens, whatever the user exported). `instance start` leaves a
// monitor process running on the host for the life of the instance with
// the environment it was given, and without --cleanenv the instance's
// processes inherit it too (N10: every command read berth's keys from
// /proc/1/environ); `exec` and `build` processes hold theirs while they
// run. Variables reach the shell in the instance over its stdin, and a
// process's own ones as APPTAINERENV_ variables added per call.
//
// Kept: PATH, HOME, USER and LOGNAME (the configuration directory
// ~/.apptainer and the instance records), TMPDIR, the locale and time
// zone, XDG_* (XDG_RUNTIME_DIR for rootless runs), APPTAINER_* and
// SINGULARITY_* (Apptainer's own settings: cache, tmp and configuration
// directories, APPTAINER_DROP_CAPS, registry credentials). APPTAINERENV_*
// and SINGULARITYENV_* from berth's environment are not kept: Apptainer
// would hand them to the container. For build, the Docker daemon's
// location and the proxy variables are kept as well (buildEnvNames).
func hostEnv(environ []string, forBuild bool) []string {
	out := make([]string, 0, 16)
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && keepForApptainer(name, forBuild) {
			out = append(out, kv)
		}
	}
	return out
}

var hostEnvNames = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "TMPDIR": true,
	"LANG": true, "LANGUAGE": true, "TZ": true,
}

// buildEnvNames are what `apptainer build` needs to reach an image: the
// Docker daemon for docker-daemon:// and a proxy for registries.
var buildEnvNames = map[string]bool{
	"DOCKER_HOST": true, "DOCKER_CONFIG": true, "DOCKER_CERT_PATH": true, "DOCKER_TLS_VERIFY": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
}

func keepForApptainer(name string, forBuild bool) bool {
	switch {
	case hostEnvNames[name]:
		return true
	case forBuild && buildEnvNames[name]:
		return true
	case strings.HasPrefix(name, "LC_"), strings.HasPrefix(name, "XDG_"):
		return true
	case strings.HasPrefix(name, "APPTAINER_"), strings.HasPrefix(name, "SINGULARITY_"):
		return true
	}
	return false
}
