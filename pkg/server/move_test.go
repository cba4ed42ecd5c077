package server

import (
	"errors"
	"testing"

	"github.com/multicache/multicache/pkg/api"
)

// TestHubHandoffIsNoDelete: a cluster handed to another replica leaves the hub without a DELETE
// event. A watch or exact snapshot that spans it from before the handoff ends with 410; one
// that does not span it reads on; positions after the handoff go on; a rejoin is adds.
func TestHubHandoffIsNoDelete(t *testing.T) {
	h := newTestHub(100, 1<<30)
	h.OnAdd("c1", cmAt("a", "1"), false)
	h.OnAdd("c2", cmAt("b", "1"), false)
	before := h.position()
	h.OnUpdate("c1", nil, cmAt("a", "2"))
	h.OnHandoff("c1")
	after := h.position()

	var expired errExpired
	if _, _, err := h.next(before, []string{"c1", "c2"}, make([]event, 0, 10)); !errors.As(err, &expired) {
		t.Errorf("watch of c1 and c2 from before the handoff: err = %v, want 410", err)
	}
	if _, _, err := h.next(before, nil, make([]event, 0, 10)); !errors.As(err, &expired) {
		t.Errorf("watch of every cluster from before the handoff: err = %v, want 410", err)
	}
	if _, err := h.snapshot(before, []string{"c1"}); !errors.As(err, &expired) {
		t.Errorf("snapshot of c1 from before the handoff: err = %v, want 410", err)
	}
	evs, _, err := h.next(before, []string{"c2"}, make([]event, 0, 10))
	if err != nil {
		t.Fatalf("watch of c2 only: %v", err)
	}
	for _, ev := range evs {
		if ev.typ == api.Deleted {
			t.Errorf("the hub made a DELETE of %s", ev.key)
		}
	}
	snap, err := h.snapshot(after, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 1 || snap[0].cluster != "c2" {
		t.Errorf("snapshot after the handoff = %v, want c2's object only", snap)
	}
	if _, _, err := h.next(after, []string{"c1", "c2"}, make([]event, 0, 10)); err != nil {
		t.Errorf("watch from after the handoff: %v", err)
	}
	h.OnAdd("c1", cmAt("a", "3"), true)
	evs, _, err = h.next(after, []string{"c1"}, make([]event, 0, 10))
	if err != nil || len(evs) != 1 || evs[0].typ != api.Added {
		t.Errorf("rejoin after the handoff: %v, %v; want one ADDED", evs, err)
	}
}
