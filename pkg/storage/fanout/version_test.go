package fanout

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/storage/peer/peertest"
)

// TestListThroughAReplicaOfThePreviousEnvelope: while p3 is a replica of the previous release
// (peer.OldestProtocolVersion), reached over the envelope, a list whose count is optional (the
// Kubernetes API's pages) has every object once in key order, by pages of every size, and no
// count, not a wrong one; a list whose count is needed (the native API's total) and a sorted
// list are 503 to retry, never answered without p3's order or count. Lists p3 does not span
// still count.
func TestListThroughAReplicaOfThePreviousEnvelope(t *testing.T) {
	r, parts, _, want := testFleet(t)
	old := httptest.NewServer(peertest.PreviousRelease(&peer.Handler{Reader: parts["p3"], Encoders: noEncoder}))
	t.Cleanup(old.Close)
	p3 := &peer.Client{ID: "p3", URL: old.URL, Clients: peer.NewClients(nil, 5*time.Second), Timeout: 5 * time.Second}
	r.opts.Peer = func(id, url string) ReadStatus {
		if id == "p3" {
			return p3
		}
		return parts[id]
	}

	for _, limit := range []int64{0, 1, 2, 3, 5, 7, 100} {
		opts := storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: limit, Count: true, CountOptional: true}
		if got := walk(t, r, opts, len(want)); !slices.Equal(got, want) {
			t.Errorf("limit %d:\n got %v\nwant %v", limit, got, want)
		}
		l, err := r.List(context.Background(), opts)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		_ = storage.Drain(l)
		if l.Count != nil {
			t.Errorf("limit %d: count %+v, where p3 cannot count", limit, l.Count)
		}
	}
	for name, opts := range map[string]storage.ListOptions{
		"does not count": {Selection: storage.Selection{Resource: "pods"}, Limit: 3, Count: true},
		"does not sort":  {Selection: storage.Selection{Resource: "pods"}, Limit: 3, SortBy: "metadata.name"},
	} {
		_, err := r.List(context.Background(), opts)
		if storage.Code(err) != http.StatusServiceUnavailable || storage.RetryAfter(err) == 0 || !strings.Contains(err.Error(), name) {
			t.Errorf("a list p3 %s: %v, want a 503 to retry saying so", name, err)
		}
	}
	l, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"c1", "c3"}}, Limit: 3, Count: true})
	if err == nil {
		err = storage.Drain(l)
	}
	switch {
	case err != nil:
		t.Errorf("a list of p2's and my clusters: %v", err)
	case l.Count == nil || l.Count.Total != 2+6:
		t.Errorf("a list of p2's and my clusters: count %+v, want 8", l.Count)
	}
}

// noEncoder encodes nothing: the fake parts' items carry their bytes.
func noEncoder(context.Context, storage.Encoding, string) (storage.Encoder, error) {
	return failing{}, nil
}

type failing struct{}

func (failing) Append(*bytes.Buffer, storage.Item, string) error {
	return errors.New("the test's items carry their bytes")
}
