package kubernetes

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/a55dbaac/berth/config"
)

// The configuration keys only this backend reads. The keys it shares with
// the other container backends (container_cpu, container_memory,
// container_disk, container_persistent, docker_network,
// docker_forward_env, env_passthrough, cwd) are fields of config.Terminal.
// Each works in the terminal: section of the file, as the TERMINAL_*
// variable of its upper-cased name, as a flag and with `berth config`.
const (
	keyImage          = "kubernetes_image"
	keyNamespace      = "kubernetes_namespace"
	keyKubeconfig     = "kubernetes_kubeconfig"
	keyContext        = "kubernetes_context"
	keyServiceAccount = "kubernetes_service_account"
	keyNodeSelector   = "kubernetes_node_selector"
	keyTolerations    = "kubernetes_tolerations"
	keyRuntimeClass   = "kubernetes_runtime_class"
	keyStorageClass   = "kubernetes_storage_class"
	keyVolumeSize     = "kubernetes_volume_size"
	keyRunAsUser      = "kubernetes_run_as_user"
	keyPullPolicy     = "kubernetes_image_pull_policy"
	keyStartTimeout   = "kubernetes_start_timeout"
	// keyDockerEnv is docker's key, declared here too with the same kind
	// and variable: its variables are exported into the session over the
	// shell's stdin (as modal does), never written into the pod's spec,
	// which anyone allowed to read pods can see.
	keyDockerEnv = "docker_env"
)

// Defaults of the kubernetes-only keys.
const (
	DefaultVolumeSize   = "10Gi"
	DefaultStartTimeout = 300 // seconds
)

// configKeys are declared through the registration.
var configKeys = []config.Key{
	{Name: keyImage, Default: config.DefaultImage, Help: "image of the pod's container (the nodes pull it as for any pod)"},
	{Name: keyNamespace, Default: "", Help: `namespace of the pods; "" = the kubeconfig context's (in a pod: its own), else "default"`, Check: checkNamespace},
	{Name: keyKubeconfig, Default: "", Help: `kubeconfig file; "" = $KUBECONFIG, else ~/.kube/config, else the in-cluster service account`},
	{Name: keyContext, Default: "", Help: `kubeconfig context; "" = its current context`},
	{Name: keyServiceAccount, Default: "", Help: `service account of the pods; "" = none mounted (the pod gets no API token)`, Check: checkServiceAccount},
	{Name: keyNodeSelector, Default: map[string]string{}, Help: `node labels the pods must match, e.g. {"pool": "sandboxes"}`, Check: checkNodeSelector},
	{Name: keyTolerations, Default: []string{}, Help: `taints the pods tolerate, as kubectl taint writes them: "key=value:Effect", "key:Effect", "key" (any effect)`, Check: checkTolerations},
	{Name: keyRuntimeClass, Default: "", Help: `RuntimeClass of the pods, e.g. "gvisor" or "kata" for stronger isolation; "" = the cluster's default runtime`, Check: checkRuntimeClass},
	{Name: keyStorageClass, Default: "", Help: `StorageClass of the volume container_persistent keeps; "" = the cluster's default class`, Check: checkStorageClass},
	{Name: keyVolumeSize, Default: DefaultVolumeSize, Help: "size of the volume container_persistent keeps (/root and /workspace), e.g. 10Gi", Check: checkVolumeSize},
	{Name: keyRunAsUser, Default: -1, Help: "uid the pod runs as: -1 = the image's user; another uid also sets runAsNonRoot (0 = root, explicitly)", Check: checkRunAsUser},
	{Name: keyPullPolicy, Default: "", Help: `imagePullPolicy: "" (Kubernetes' default: Always for :latest, else IfNotPresent), Always, IfNotPresent or Never`, Check: checkPullPolicy},
	{Name: keyStartTimeout, Default: DefaultStartTimeout, Help: "seconds to wait for a pod to be scheduled, pull its image and start", Check: checkStartTimeout},
	{Name: keyDockerEnv, Default: map[string]string{}, Help: `variables set in the environment, e.g. {"DEBUG": "1"}`},
}

func checkNamespace(v any) error {
	if s := v.(string); s != "" {
		if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
			return errors.New("not a namespace name: " + strings.Join(errs, "; "))
		}
	}
	return nil
}

func checkServiceAccount(v any) error {
	if s := v.(string); s != "" {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return errors.New("not a service account name: " + strings.Join(errs, "; "))
		}
	}
	return nil
}

func checkRuntimeClass(v any) error {
	if s := v.(string); s != "" {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return errors.New("not a RuntimeClass name: " + strings.Join(errs, "; "))
		}
	}
	return nil
}

func checkStorageClass(v any) error {
	if s := v.(string); s != "" {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return errors.New("not a StorageClass name: " + strings.Join(errs, "; "))
		}
	}
	return nil
}

func checkNodeSelector(v any) error {
	for k, val := range v.(map[string]string) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, val, strings.Join(errs, "; "))
		}
	}
	return nil
}

func checkTolerations(v any) error {
	for _, s := range v.([]string) {
		if _, err := parseToleration(s); err != nil {
			return err
		}
	}
	return nil
}

func checkVolumeSize(v any) error {
	q, err := resource.ParseQuantity(v.(string))
	if err != nil {
		return errors.New("not a size: write it as Kubernetes does, e.g. 10Gi or 500Mi")
	}
	if q.Sign() <= 0 {
		return errors.New("must be more than zero")
	}
	return nil
}

func checkRunAsUser(v any) error {
	if n := v.(int); n < -1 || n > 2147483647 {
		return errors.New("must be -1 (the image's user) or a uid from 0 to 2147483647")
	}
	return nil
}

func checkPullPolicy(v any) error {
	switch v.(string) {
	case "", "Always", "IfNotPresent", "Never":
		return nil
	}
	return errors.New(`must be "", Always, IfNotPresent or Never`)
}

func checkStartTimeout(v any) error {
	if n := v.(int); n < 1 || n > 3600 {
		return errors.New("must be whole seconds from 1 to 3600")
	}
	return nil
}
