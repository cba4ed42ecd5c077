package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Paths of the native API.
const (
	// ClustersPath answers Clusters.
	ClustersPath = "/multicache/v1/clusters"
	// ResourcesPath is followed by "/{resource}" (a List, or with watch=true a stream of
	// WatchEvents) or "/{resource}/{cluster}/{namespace}/{name}" (an Item; "_" as the namespace
	// of a cluster-scoped object).
	ResourcesPath = "/multicache/v1/resources"
)

// ClusterAnnotation is carried by every object the Kubernetes API serves: the name of the
// cluster it lives in. In the fleet view, a label selector requirement on this key selects
// clusters (multicache.io/cluster=east, multicache.io/cluster in (east,west)).
const ClusterAnnotation = "multicache.io/cluster"

// ResourceVersionAnnotation holds, on objects the Kubernetes API serves, the object's
// resourceVersion in its own cluster. Their metadata.resourceVersion is the daemon's: a
// position in the fleet's change stream that a watch resumes from.
const ResourceVersionAnnotation = "multicache.io/resource-version"

// List is one page of GET /multicache/v1/resources/{resource}: items in cluster, namespace, name
// order; Continue, when set, fetches the next page; ResourceVersion is where a watch resumes
// without a gap; Clusters says how fresh each cluster the answer spans is.
type List struct {
	Items           []Item `json:"items"`
	Continue        string `json:"continue,omitempty"`
	ResourceVersion string `json:"resourceVersion"`
	// Total is how many items the list spans, on every page, counted with this one.
	Total    int64              `json:"total"`
	Clusters []ClusterFreshness `json:"clusters"`
}

// Item is one object and the cluster it lives in; also the answer to a single-object GET.
type Item struct {
	Cluster string          `json:"cluster"`
	Object  json.RawMessage `json:"object"`
}

// ClusterFreshness is one cluster's state as an answer spanning it reports it.
type ClusterFreshness struct {
	Name   string `json:"name"`
	Synced bool   `json:"synced"`
	// NotServed: the cluster does not serve the resource; it contributes nothing, by design.
	NotServed bool `json:"notServed,omitempty"`
	// Forbidden: the caller may not read the cluster, so the answer leaves it out.
	Forbidden bool       `json:"forbidden,omitempty"`
	LastSync  *time.Time `json:"lastSync,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// Watch event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	// Bookmark events carry only a resource version to resume from: Object is
	// {"kind":"Bookmark","metadata":{"resourceVersion":…}}.
	Bookmark = "BOOKMARK"
	// Error events end a watch; Object is an Error. Code 410 (Expired) means: list again.
	ErrorEvent = "ERROR"
	// SummaryEvent is a streamed summary's (summary?watch=true): Object is a whole Summary,
	// which replaces the one before; Cluster is empty.
	SummaryEvent = "SUMMARY"
)

// WatchEvent is one line of a watch stream (NDJSON).
type WatchEvent struct {
	Type    string          `json:"type"`
	Cluster string          `json:"cluster"`
	Object  json.RawMessage `json:"object,omitempty"`
}

// Clusters is the answer to GET /multicache/v1/clusters.
type Clusters struct {
	Clusters []Cluster `json:"clusters"`
}

// Cluster is one cluster's state and its resources'.
type Cluster struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Owner is the replica that runs the cluster, when replicas share the fleet.
	Owner    string     `json:"owner,omitempty"`
	LastSync *time.Time `json:"lastSync,omitempty"`
	Error    string     `json:"error,omitempty"`
	// Restarts counts how often the cluster's stacks were rebuilt because its server or
	// credentials changed.
	Restarts  int        `json:"restarts,omitempty"`
	Resources []Resource `json:"resources"`
}

// Resource is one cluster × resource.
type Resource struct {
	Resource string `json:"resource"`
	State    string `json:"state"`
	Objects  int    `json:"objects"`
	Error    string `json:"error,omitempty"`
	// Progress is how far the latest initial list or relist got; absent before the first list
	// starts.
	Progress *Progress `json:"progress,omitempty"`
}

// Syncing reports whether r's progress is worth showing: its list is under way, or it has not
// synced since.
func (r Resource) Syncing() bool {
	return r.Progress != nil && (r.Progress.Listing || r.State == "Syncing" || r.State == "Pending")
}

// Progress is a list's progress: objects the API server has sent so far, and the total it
// reported (remainingItemCount plus what was sent; 0 when it did not say, as with a label or
// field selector). Listing is false once the list is complete.
type Progress struct {
	Loaded   int64 `json:"loaded"`
	Expected int64 `json:"expected,omitempty"`
	Listing  bool  `json:"listing"`
}

// ProgressText sums ps: "loaded/expected (pct%)", "loaded/?" when a server did not give its
// total, and "-" for none. Callers pass the lists of resources not yet synced.
func ProgressText(ps ...Progress) string {
	var loaded, expected int64
	listing, known := false, true
	for _, p := range ps {
		listing = true
		loaded += p.Loaded
		expected += p.Expected
		known = known && p.Expected > 0
	}
	switch {
	case !listing:
		return "-"
	case !known:
		return fmt.Sprintf("%d/?", loaded)
	default:
		return fmt.Sprintf("%d/%d (%d%%)", loaded, expected, min(100, loaded*100/expected))
	}
}

// Error is every error answer's body, and the object of an ERROR watch event. Its fields are
// those of a Kubernetes metav1.Status that matter here.
type Error struct {
	Kind    string `json:"kind,omitempty"` // "Status" in watch events
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// RetryAfter is the answer's Retry-After header, in seconds (0: none): a 429 or 503 says
	// when the answer can be whole again. It is not part of the body.
	RetryAfter int `json:"-"`
}

// Error is "Reason (code): message".
func (e *Error) Error() string { return e.Reason + " (" + itoa(e.Code) + "): " + e.Message }

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// BookmarkObject is the object of a BOOKMARK event.
type BookmarkObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// ObjectMeta is the part of an object's metadata clients commonly read from raw JSON.
type ObjectMeta struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace,omitempty"`
		UID             string `json:"uid,omitempty"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
}

// Summary is the answer to GET /multicache/v1/resources/{resource}/summary?by=KEY[,KEY…]: the
// objects the list filters select, counted in groups by the keys' values.
type Summary struct {
	Kind string   `json:"kind"` // "Summary"
	By   []string `json:"by"`
	// Groups are sorted by count, most first, then by key (sort=count), or by key (sort=key),
	// and cut to limit when one is given.
	Groups []SummaryGroup `json:"groups"`
	// Total is how many objects were counted, each once whatever its groups.
	Total    int                `json:"total"`
	Clusters []ClusterFreshness `json:"clusters"`
}

// SummaryGroup is one group: each key's value (null for an object without one) and its count.
type SummaryGroup struct {
	Key   map[string]*string `json:"key"`
	Count int                `json:"count"`
}
