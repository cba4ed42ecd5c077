package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestProgressText(t *testing.T) {
	for _, tc := range []struct {
		name string
		ps   []Progress
		want string
	}{
		{"no list under way", nil, "-"},
		{"one list with a total", []Progress{{Loaded: 50, Expected: 200, Listing: true}}, "50/200 (25%)"},
		{"lists summed", []Progress{{Loaded: 50, Expected: 100}, {Loaded: 100, Expected: 100}}, "150/200 (75%)"},
		{"a total unknown makes the sum unknown", []Progress{{Loaded: 50, Expected: 100}, {Loaded: 7}}, "57/?"},
		// remainingItemCount is an estimate: more may arrive than announced, and the
		// percentage never passes 100.
		{"more than expected", []Progress{{Loaded: 130, Expected: 100}}, "130/100 (100%)"},
	} {
		if got := ProgressText(tc.ps...); got != tc.want {
			t.Errorf("%s: ProgressText = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestResourceSyncing(t *testing.T) {
	p := &Progress{Loaded: 1, Expected: 2}
	for _, tc := range []struct {
		r    Resource
		want bool
	}{
		{Resource{State: "Syncing"}, false}, // no list started: nothing to show
		{Resource{State: "Syncing", Progress: p}, true},
		{Resource{State: "Pending", Progress: p}, true},
		{Resource{State: "Synced", Progress: p}, false},
		{Resource{State: "Synced", Progress: &Progress{Loaded: 1, Listing: true}}, true}, // a relist under way
		{Resource{State: "Failed", Progress: p}, false},
	} {
		if got := tc.r.Syncing(); got != tc.want {
			t.Errorf("%+v (progress %+v): Syncing = %v, want %v", tc.r, tc.r.Progress, got, tc.want)
		}
	}
}

func TestErrorReadsAsReasonCodeMessage(t *testing.T) {
	e := &Error{Code: 503, Reason: "ServiceUnavailable", Message: "cluster \"east\" is not synced", RetryAfter: 2}
	if got, want := e.Error(), `ServiceUnavailable (503): cluster "east" is not synced`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	// Retry-After travels as a header, never in the body.
	if strings.Contains(string(b), "etry") {
		t.Errorf("the body carries RetryAfter: %s", b)
	}
}

// TestWireShapes pins the JSON names clients read: renaming a field breaks every client of
// the native API, so a rename has to fail here first.
func TestWireShapes(t *testing.T) {
	list := List{
		Items:           []Item{{Cluster: "east", Object: json.RawMessage(`{"metadata":{"name":"a"}}`)}},
		Continue:        "c1",
		ResourceVersion: "rv1",
		Total:           7,
		Clusters:        []ClusterFreshness{{Name: "east", Synced: true}, {Name: "west", NotServed: true, Forbidden: true, Error: "boom"}},
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"items":[{"cluster":"east","object":{"metadata":{"name":"a"}}}],"continue":"c1","resourceVersion":"rv1","total":7,` +
		`"clusters":[{"name":"east","synced":true},{"name":"west","synced":false,"notServed":true,"forbidden":true,"error":"boom"}]}`
	if string(b) != want {
		t.Errorf("List encodes as\n%s\nwant\n%s", b, want)
	}
	var back List
	if err := json.Unmarshal(b, &back); err != nil || back.Items[0].Cluster != "east" || back.Continue != "c1" || !back.Clusters[1].NotServed {
		t.Errorf("List does not decode what it encodes: %+v, %v", back, err)
	}

	ev := WatchEvent{Type: Bookmark, Object: json.RawMessage(`{"kind":"Bookmark","metadata":{"resourceVersion":"9"}}`)}
	b, _ = json.Marshal(ev)
	var got struct {
		Type   string
		Object BookmarkObject
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Type != "BOOKMARK" || got.Object.Kind != "Bookmark" || got.Object.Metadata.ResourceVersion != "9" {
		t.Errorf("a bookmark event reads back as %+v (%v) from %s", got, err, b)
	}

	var meta ObjectMeta
	if err := json.Unmarshal([]byte(`{"metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","labels":{"x":"y"}}}`), &meta); err != nil ||
		meta.Metadata.Name != "a" || meta.Metadata.Namespace != "ns" || meta.Metadata.UID != "u" || meta.Metadata.ResourceVersion != "7" {
		t.Errorf("ObjectMeta reads %+v (%v)", meta, err)
	}

	cs := Clusters{Clusters: []Cluster{{Name: "east", State: "Synced", Owner: "r1", Restarts: 2,
		Resources: []Resource{{Resource: "pods", State: "Synced", Objects: 3, Progress: &Progress{Loaded: 3, Expected: 3}}}}}}
	b, _ = json.Marshal(cs)
	want = `{"clusters":[{"name":"east","state":"Synced","owner":"r1","restarts":2,"resources":[{"resource":"pods","state":"Synced","objects":3,"progress":{"loaded":3,"expected":3,"listing":false}}]}]}`
	if string(b) != want {
		t.Errorf("Clusters encodes as\n%s\nwant\n%s", b, want)
	}
}
