package clusterset

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// TestProbeStopsWithItsContext: the probe checks again and again on its timer, and once its
// context ends it stops whether a check is running or due, and lets go of its WaitGroup only
// when no check runs and none is due.
func TestProbeStopsWithItsContext(t *testing.T) {
	var checks atomic.Int32
	block := make(chan struct{})
	var blocking atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	defer srv.Close()
	var unblock sync.Once
	release := func() { unblock.Do(func() { close(block) }) }
	defer release()
	// A check is counted as it starts. A blocked one waits for release alone, deaf to its
	// context, as a check stuck past its context's end would be.
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			checks.Add(1)
			if blocking.Load() {
				<-block
			}
			return rt.RoundTrip(req)
		})
	}
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL, WrapTransport: wrap})
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{reg: &Registry{opts: Options{ProbeInterval: 5 * time.Millisecond, ProbeTimeout: time.Minute}}}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s: %s", what)
			}
		}
	}
	released := func(wg *sync.WaitGroup) chan struct{} {
		ch := make(chan struct{})
		go func() { wg.Wait(); close(ch) }()
		return ch
	}

	// Stopped between checks.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	r.probe(ctx, dc, &wg)
	waitFor("three checks", func() bool { return checks.Load() >= 3 })
	cancel()
	select {
	case <-released(&wg):
	case <-time.After(30 * time.Second):
		t.Fatal("the probe did not stop within 30s of its context's end")
	}
	after := checks.Load()
	time.Sleep(50 * time.Millisecond) // ten intervals
	if n := checks.Load(); n > after {
		t.Errorf("%d checks after the probe stopped", n-after)
	}

	// Stopped while a check runs: the WaitGroup waits for that check, and no other follows.
	checks.Store(0)
	blocking.Store(true)
	ctx, cancel = context.WithCancel(context.Background())
	var wg2 sync.WaitGroup
	r.probe(ctx, dc, &wg2)
	waitFor("a check in flight", func() bool { return checks.Load() == 1 })
	done := released(&wg2)
	cancel()
	select {
	case <-done:
		t.Fatal("the probe let go of its WaitGroup while a check still ran")
	case <-time.After(50 * time.Millisecond):
	}
	release() // the check returns; the probe then stops
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the probe did not stop within 30s of its last check's return")
	}
	time.Sleep(50 * time.Millisecond)
	if n := checks.Load(); n != 1 {
		t.Errorf("%d checks, want the one in flight alone", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
