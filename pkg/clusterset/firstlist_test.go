package clusterset

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/internal/fakeapi"
)

// TestFirstListThroughARegistry runs whole stacks against a fake API server: a start with a
// state to take streams from it and sends the cluster no LIST but the stream's progress probe
// (limit 1); a start without one
// estimates the list with limit 1, then LISTs it without trying watch-list first, and gives
// its reservation back once synced.
func TestFirstListThroughARegistry(t *testing.T) {
	live := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "live"}}}
	handedPod := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "handed", ResourceVersion: "5"}}
	raw, err := json.Marshal(handedPod)
	if err != nil {
		t.Fatal(err)
	}
	for _, withState := range []bool{true, false} {
		t.Run(map[bool]string{true: "handed state", false: "no state"}[withState], func(t *testing.T) {
			api := fakeapi.New(t)
			api.SetPods(live)
			reg, err := New(Options{Source: Static{{Name: "a", Config: api.Config(), Fingerprint: "1"}},
				Resources: []ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour, UnpagedListBudget: 100})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			takes := 0
			reg.SetTaker(func(_ context.Context, cluster, key string) (*Handed, bool, error) {
				mu.Lock()
				takes++
				mu.Unlock()
				if !withState {
					return nil, false, nil
				}
				return &Handed{Key: key, ResourceVersion: "5", Server: api.Config().Host, Items: []json.RawMessage{raw}}, true, nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = reg.Start(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })

			pods, _ := reg.Aggregate("pods")
			want := "live"
			if withState {
				want = "handed"
			}
			eventually(t, func() bool {
				keys := pods.ListKeys()
				return len(keys) == 1 && keys[0] == "a|ns/"+want && pods.HasSynced("a")
			})
			mu.Lock()
			if takes != 1 {
				t.Errorf("the taker was asked %d times, want once", takes)
			}
			mu.Unlock()
			var limits []string
			for _, q := range api.PodLists() {
				limits = append(limits, q.Get("limit")+"@"+q.Get("resourceVersion"))
			}
			if withState {
				// At most the stream's progress probe (limit 1); never a list of the objects.
				for _, l := range limits {
					if l != "1@" {
						t.Fatalf("a start from a handed state listed the cluster: %v", limits)
					}
				}
				return
			}
			// The estimate (limit 1, a consistent read), then the reflector's list from "0".
			if len(limits) != 2 || limits[0] != "1@" || !slices.Contains([]string{"500@0", "@0"}, limits[1]) {
				t.Fatalf("lists sent (limit@resourceVersion): %v; want the estimate, then one list from 0", limits)
			}
			if n := api.WatchLists(); n != 0 {
				t.Fatalf("%d watch-lists asked for; a planned list never streams", n)
			}
			eventually(t, func() bool {
				reg.unpaged.mu.Lock()
				defer reg.unpaged.mu.Unlock()
				return reg.unpaged.free == 100
			})
		})
	}
}
