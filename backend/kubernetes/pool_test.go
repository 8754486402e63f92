package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/a55dbaac/berth/internal/testenv/k8senv"
)

// quotaRoom counts the pods of a shape the tightest quota still admits:
// by pod count and by each request and limit the quota bounds, what is
// used subtracted; -1 when no quota bounds them.
func TestQuotaRoom(t *testing.T) {
	q := func(hard, used corev1.ResourceList) corev1.ResourceQuota {
		return corev1.ResourceQuota{Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
	}
	mi := func(s string) resource.Quantity { return resource.MustParse(s) }
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: mi("256Mi"), corev1.ResourceCPU: mi("500m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: mi("256Mi"), corev1.ResourceCPU: mi("500m")},
	}
	for _, c := range []struct {
		name   string
		quotas []corev1.ResourceQuota
		want   int
	}{
		{"no quota", nil, -1},
		{"a quota on something else", []corev1.ResourceQuota{q(corev1.ResourceList{"services": mi("3")}, nil)}, -1},
		{"pods", []corev1.ResourceQuota{q(corev1.ResourceList{"pods": mi("5")}, corev1.ResourceList{"pods": mi("2")})}, 3},
		{"pods used up", []corev1.ResourceQuota{q(corev1.ResourceList{"pods": mi("2")}, corev1.ResourceList{"pods": mi("3")})}, 0},
		{"memory requests", []corev1.ResourceQuota{q(corev1.ResourceList{"requests.memory": mi("1Gi")}, corev1.ResourceList{"requests.memory": mi("512Mi")})}, 2},
		{"cpu limits", []corev1.ResourceQuota{q(corev1.ResourceList{"limits.cpu": mi("2")}, corev1.ResourceList{"limits.cpu": mi("900m")})}, 2},
		{"the tightest of two", []corev1.ResourceQuota{
			q(corev1.ResourceList{"pods": mi("10")}, nil),
			q(corev1.ResourceList{"memory": mi("1Gi")}, corev1.ResourceList{"memory": mi("768Mi")}),
		}, 1},
	} {
		if got := quotaRoom(c.quotas, res); got != c.want {
			t.Errorf("%s: quotaRoom = %d, want %d", c.name, got, c.want)
		}
	}
}

// A pooled pod claimed for a key keeps its pool name: another berth that
// opens the key (a second process, or this one after its handle closed)
// finds that pod by its labels instead of making a second environment.
func TestClaimedPodFoundByAnotherBerth(t *testing.T) {
	k8senv.Require(t)
	f := newFixture(t)
	opts := f.options(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := makeMember(ctx, opts, currentOwner())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Discard(context.Background()) })
	be, err := m.Claim(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	claimed := be.(*Backend)
	other := newBackend(t, opts)
	if other.PodName() != claimed.PodName() || other.PodUID() != claimed.PodUID() {
		t.Fatalf("another berth for the key opened pod %s (%s), not the claimed %s (%s)",
			other.PodName(), other.PodUID(), claimed.PodName(), claimed.PodUID())
	}
}
