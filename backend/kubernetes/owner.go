package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/a55dbaac/berth/internal/procmark"
)

// currentOwner returns this process's mark ("" when /proc cannot tell).
// Tests replace it to create pods owned by a dead process.
var currentOwner = procmark.Self

// newNonce returns the random part of a Backend's holder annotation.
func newNonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hold records that this berth uses pod p when another process created it:
// an annotation AnnHolderPrefix+nonce names this process, so another
// berth's crash sweep does not take the pod for an orphan while this one
// lives. Unlike a container's labels, a pod's annotations can change, so
// the pod itself carries the claim. Failing to record it is logged, not
// fatal: the pod is then used as an unclaimed one.
func (b *Backend) hold(ctx context.Context, p *corev1.Pod) {
	me := currentOwner()
	if me == "" || p.Annotations[AnnOwner] == me || p.Annotations[AnnHolderPrefix+b.nonce] == me {
		return
	}
	if err := b.annotate(ctx, p.Name, p.UID, map[string]*string{AnnHolderPrefix + b.nonce: &me}); err != nil {
		b.log.Warn("kubernetes: recording that this berth uses the pod failed; another berth may take it for an orphan",
			"pod", p.Name, "err", err)
		return
	}
	b.held = true
}

// release removes this berth's holder annotation (a pod already gone is
// fine).
func (b *Backend) release(ctx context.Context, name string, uid types.UID) error {
	if !b.held {
		return nil
	}
	b.held = false
	err := b.annotate(ctx, name, uid, map[string]*string{AnnHolderPrefix + b.nonce: nil})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// annotate sets (value) or removes (nil) annotations of the pod name with
// the given UID, in one merge patch.
func (b *Backend) annotate(ctx context.Context, name string, uid types.UID, ann map[string]*string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": ann, "uid": uid}}
	body, _ := json.Marshal(patch)
	_, err := b.c.api.pods(b.c.namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// orphaned reports whether every berth that created or holds pod p is
// known to be dead (procmark.Gone: marks of another machine or boot are
// never judged gone).
func orphaned(p *corev1.Pod) bool {
	marks := []string{p.Annotations[AnnOwner]}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, AnnHolderPrefix) {
			marks = append(marks, v)
		}
	}
	for _, m := range marks {
		if !procmark.Gone(m) {
			return false
		}
	}
	return true
}
