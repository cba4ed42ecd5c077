package shard

import (
	"strings"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestFenceLeaseName(t *testing.T) {
	if got := fenceLeaseName("kind-a.example"); got != "multicache-fence-kind-a.example" {
		t.Errorf("plain name: %q", got)
	}
	long := strings.Repeat("a", 240) // valid cluster name; with the prefix longer than 253
	for _, cluster := range []string{long, "Kind-A", "ctx_1", "arn:aws:eks:eu-west-1:1:cluster/x", "user@cluster"} {
		got := fenceLeaseName(cluster)
		if len(got) != len(fencePrefix)+16 || !strings.HasPrefix(got, fencePrefix) {
			t.Errorf("fenceLeaseName(%.20q…) = %q, want the prefix and 16 hex digits", cluster, got)
		}
		if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
			t.Errorf("fenceLeaseName(%.20q…) = %q: %v", cluster, got, msgs)
		}
		if got == fenceLeaseName(cluster+"x") {
			t.Errorf("%q and %q share a fence", cluster, cluster+"x")
		}
		l := (&Coordinator{opts: Options{Identity: "me", Namespace: "ns"}}).newFence(cluster, metav1.Now().Time)
		if l.Name != got || fenceCluster(l) != cluster || leaseKind(l) != kindFence || holderOf(l) != "me" {
			t.Errorf("new fence for %.20q…: %+v", cluster, l.ObjectMeta)
		}
	}
	// 236 characters plus the prefix is exactly 253: still plain.
	edge := strings.Repeat("b", 253-len(fencePrefix))
	if got := fenceLeaseName(edge); got != fencePrefix+edge {
		t.Errorf("253-character name was hashed: %q", got)
	}
	if got := fenceCluster(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fencePrefix + "x"}}); got != "x" {
		t.Errorf("fence without annotation: cluster %q", got)
	}
}

// TestPeerWeightIsBounded: a peer Lease's weight annotation counts between 1 and MaxWeight,
// whatever it says, so one writable Lease cannot claim most of the fleet.
func TestPeerWeightIsBounded(t *testing.T) {
	for anno, want := range map[string]int{"": 1, "x": 1, "0": 1, "-5": 1, "3": 3, "100": MaxWeight, "101": MaxWeight, "999999999": MaxWeight} {
		l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annoWeight: anno}}}
		if got := peerWeight(l); got != want {
			t.Errorf("weight annotation %q counts %d, want %d", anno, got, want)
		}
	}
}
