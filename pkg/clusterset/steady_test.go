package clusterset

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestSteadyStackFollowsErrors: the behaviour that a steady stack, no longer polled, must keep
// (the polling cut itself is measured by BenchmarkFixedCost's idle CPU, not here). A stack
// that is synced with nothing wrong reports LastSync as now; an error or a failed probe wakes
// it (Degraded, LastSync frozen at the error), a passing probe makes it steady again, and
// after a reflector error it notices the reflector's progress (a watch event with a new
// resourceVersion) by polling, and is Synced again. Once stopped, LastSync stays where it was.
func TestSteadyStackFollowsErrors(t *testing.T) {
	fw := watch.NewFake()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}
	inf := cache.NewSharedIndexInformer(listOnly{lw}, &corev1.ConfigMap{}, 0, cache.Indexers{})
	s := newStack("c1", ResourceSpec{Name: "configmaps"}, &statusBoard{}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, inf, resolved{}, "")
	}()
	waitState := func(want State) ResourceStatus {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := s.status()
			if st.State == want {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("state %s (%q), want %s", st.State, st.Error, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	advancing := func(what string, want bool) {
		t.Helper()
		a := s.status().LastSync
		time.Sleep(3 * stackPoll)
		b := s.status().LastSync
		if got := b.After(a); got != want {
			t.Errorf("%s: LastSync %s then %s: advancing %v, want %v", what, a.Format(time.StampMilli), b.Format(time.StampMilli), got, want)
		}
	}

	waitState(Synced)
	advancing("synced", true)
	if got := time.Since(s.status().LastSync); got > stackPoll {
		t.Errorf("a steady stack's LastSync is %s old", got)
	}

	s.probeFailed("probe: connection refused")
	waitState(Degraded)
	advancing("probe failing", false)

	s.probeOK()
	waitState(Synced)
	advancing("probe passing again", true)

	s.onListWatchError(ctx, errors.New("watch: connection reset"))
	if st := waitState(Degraded); st.Error == "" {
		t.Error("Degraded after a reflector error without the error's text")
	}
	advancing("reflector error, no progress", false)
	if st := s.status(); st.State != Degraded {
		t.Fatalf("without progress the stack became %s", st.State)
	}
	fw.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "8"}})
	waitState(Synced)
	advancing("recovered", true)

	cancel()
	<-done
	advancing("stopped", false)
}
