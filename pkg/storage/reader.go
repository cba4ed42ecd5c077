package storage

import (
	"context"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Reader reads the cached objects of one resource at a time, across the clusters a selection
// spans, as client-go's ListerWatcher and Indexer read one cluster's. Every error is an
// *apierrors.StatusError (errors.go).
type Reader interface {
	// List answers a page of a list in key order (cluster, namespace, name), or every item
	// without a limit.
	List(ctx context.Context, opts ListOptions) (*List, error)
	// Get answers the objects of one name in the clusters the selection spans: none (the front
	// answers 404), one, or one per cluster that holds the name.
	Get(ctx context.Context, opts GetOptions) (*List, error)
	// Watch opens a watch. It fails before any event when the watch is refused (a bad option,
	// 403, 429 while a cluster it starts with is not complete, 410 for a position gone); Run
	// then streams it.
	Watch(ctx context.Context, opts WatchOptions) (Watch, error)
}

// Watch is an open watch.
type Watch interface {
	// Freshness and Warnings are those of the answer, known before its first event (as a
	// List's).
	Freshness() []api.ClusterFreshness
	Warnings() []string
	// Run sends the watch to sink until ctx ends or the watch's timeout passes (nil), or the
	// watch must end: an *apierrors.StatusError to send as an ERROR event (410 when it can
	// go on no more: its position is gone, its plan changed), or the sink's error. Run is
	// called once.
	Run(ctx context.Context, sink Sink) error
}

// Sink receives a watch's stream. Its calls are sequential.
type Sink interface {
	// Event sends an object's event: ADDED, MODIFIED or DELETED. it.RV is the position after
	// it (the resourceVersion the Kubernetes API shows; the native API shows none).
	Event(typ string, it Item) error
	// Bookmark sends the watch's position. initialEnd marks the end of its initial events (the
	// k8s.io/initial-events-end annotation of the Kubernetes API).
	Bookmark(rv string, initialEnd bool) error
	// Flush pushes what was sent to the client.
	Flush()
}

// Status reads what replicas say of their clusters.
type Status interface {
	// Clusters lists the clusters the selection spans that the caller may read, as their
	// owners report them, sorted by name.
	Clusters(ctx context.Context, opts ClusterOptions) ([]api.Cluster, error)
	// Definitions lists the definitions of the custom resources cached in the clusters the
	// selection spans that the caller may read: one per name, sorted.
	Definitions(ctx context.Context, opts ClusterOptions) ([]Definition, error)
	// Resources lists how each cluster the selection spans serves the configured resources
	// (their discovery: group, version, kind, names, scope, state), for the catalog of what the
	// Kubernetes API serves; its definitions are left out. What clusters serve is not a secret
	// of theirs: every caller's catalog is the same.
	Resources(ctx context.Context, opts ClusterOptions) ([]clusterset.ClusterStatus, error)
}

// Selection is which objects of a resource a read spans.
type Selection struct {
	// Resource is the configured name of the resource.
	Resource string `json:"resource"`
	// Clusters are the clusters the request names (/clusters/{name}, cluster=): one the caller
	// may not read is 403. Nil: the fleet, the clusters the caller may read.
	Clusters []string `json:"clusters,omitempty"`
	// LabelSelector selects objects; its requirements on the key multicache.io/cluster select
	// clusters instead, as if each cluster were labelled with its name (ClusterSelector).
	LabelSelector string `json:"labelSelector,omitempty"`
	// FieldSelector: metadata.name, metadata.namespace, spec.nodeName, status.phase, or an index
	// name of the resource.
	FieldSelector string `json:"fieldSelector,omitempty"`
	// Namespace, "" for every one. Ignored for a cluster-scoped resource.
	Namespace string `json:"namespace,omitempty"`
	// Index and Value select by a configured index.
	Index string `json:"index,omitempty"`
	Value string `json:"value,omitempty"`
	// Where is a CEL expression over `object` that an object must make true
	// (index.CompileFilter).
	Where string `json:"where,omitempty"`
	// Owner keeps the objects under one owner, group/Kind/namespace/name ("core" for the core
	// group): those whose chain of owners, followed within their cluster through the objects
	// cached, holds it.
	Owner string `json:"owner,omitempty"`
	// Part, when not nil, makes the read one replica's share of a plan: it spans these clusters
	// of the fleet's and no other, started here yet or not. One not complete here is never
	// left out: a list, a get that finds nothing, or a watch that starts with the current
	// objects is 429 meanwhile. Unlike Clusters, it names no cluster to the access check: one
	// the caller may not read is left out, as in a fleet-wide answer.
	Part []string `json:"part"`
}

// ListOptions is a list.
type ListOptions struct {
	Selection
	// Limit is the page size; 0: every item.
	Limit int64 `json:"limit,omitempty"`
	// Continue is the previous page's continue token.
	Continue string `json:"continue,omitempty"`
	// ResourceVersion and ResourceVersionMatch as kube-apiserver reads them: "" or "0" is now;
	// with Exact, the list as of that position (410 once its later events are gone).
	ResourceVersion      string                      `json:"resourceVersion,omitempty"`
	ResourceVersionMatch metav1.ResourceVersionMatch `json:"resourceVersionMatch,omitempty"`
	// Encoding is how the items will be written: a peer encodes its items so (Item.Raw).
	Encoding Encoding `json:"encoding"`
	// SortBy, when set, is a JSONPath (such as metadata.creationTimestamp or
	// status.containerStatuses[0].restartCount) whose first value orders the list (sort.go),
	// ascending or, with Desc, descending; its items carry their Sort. Without it, the list is in
	// key order.
	SortBy string `json:"sortBy,omitempty"`
	Desc   bool   `json:"desc,omitempty"`
	// Count asks for List.Count. CountOnly answers the count and the position and no item: a
	// part of a fleet's page that gives none of its items.
	Count     bool `json:"count,omitempty"`
	CountOnly bool `json:"countOnly,omitempty"`
	// CountOptional lets the list be answered without its Count rather than refused when a
	// part cannot count (a replica of the previous envelope, during a rolling update): the
	// Kubernetes API's remainingItemCount is optional, the native API's total is not. It is
	// the caller's to say, and never sent: a part's own answer counts or fails.
	CountOptional bool `json:"-"`
}

// GetOptions is a get by name.
type GetOptions struct {
	Selection
	Name     string   `json:"name"`
	Encoding Encoding `json:"encoding"`
}

// WatchOptions is a watch.
type WatchOptions struct {
	Selection
	// ResourceVersion is where the watch resumes: after that position. "" or "0": from now.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Initial: the watch starts with every current object as ADDED (the snapshot at its
	// position), before the events after it.
	Initial bool `json:"initial,omitempty"`
	// StartBookmark: a BOOKMARK at the start position once the initial objects (if any) are
	// sent, marked as their end when there are.
	StartBookmark bool `json:"startBookmark,omitempty"`
	// Bookmarks: a BOOKMARK now and then.
	Bookmarks bool `json:"bookmarks,omitempty"`
	// Timeout ends the watch cleanly; 0: none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Encoding is how the objects will be written.
	Encoding Encoding `json:"encoding"`
	// Guard, when set, ends the watch with 410 once what it was planned on changes. A fan-out
	// sets it on its parts; it never travels.
	Guard watchcache.Guard `json:"-"`
}

// ClusterOptions is a read of the clusters' status.
type ClusterOptions struct {
	// Clusters, LabelSelector (its requirements on multicache.io/cluster) and Part select
	// clusters as in Selection; the label selector's other requirements select definitions.
	Clusters      []string `json:"clusters,omitempty"`
	LabelSelector string   `json:"labelSelector,omitempty"`
	Part          []string `json:"part,omitempty"`
}

// Item is one object of an answer.
type Item struct {
	Key aggregate.Key
	// Object is the cached object, never to be modified (it is the cache's); nil when Raw is
	// set. Secrets come without their data unless the daemon serves it.
	Object any
	// Seq is the position of the event that made the object in its replica's watch cache, of
	// the answer's epoch (List.Epoch); 0 when unknown.
	Seq uint64
	// RV, when set, is the resourceVersion the object shows instead of its own position: a
	// merged answer's position, or the position after a watch event.
	RV string
	// Raw is the object as its owner encoded it, in the request's Encoding, written as it is.
	// RawRV is the resourceVersion written in it, which a writer replaces with RV.
	Raw   []byte
	RawRV string
	// Sort is the item's sort value in a sorted list (SortValue); "" otherwise.
	Sort string
}

// ResourceVersion is the resourceVersion it shows: RV, else its position of epoch.
func (it Item) ResourceVersion(epoch string) string {
	if it.RV != "" || epoch == "" {
		return it.RV
	}
	return watchcache.Position{Epoch: epoch, Seq: it.Seq}.String()
}

// List is a list's answer, or a get's.
type List struct {
	// Items in key order. More, when set, streams the items after them (an unpaged list
	// merged from replicas, never held whole); the reader of the list closes it.
	Items []Item
	More  ItemStream
	// ResourceVersion is the answer's position: a watch from it misses nothing of it.
	ResourceVersion string
	// Epoch is that of the items' Seq, "" when they carry none.
	Epoch string
	// Continue, when set, asks for the next page.
	Continue string
	// Count, when the list asked for it, is how many items the list spans and how many come
	// before the page.
	Count *Count
	// Freshness is, per cluster the answer spans, how fresh it is: synced, not served,
	// forbidden (left out), or why not, sorted by name.
	Freshness []api.ClusterFreshness
	// Warnings of the answer, in words, once each.
	Warnings []string
}

// AddWarning adds w once.
func (l *List) AddWarning(w ...string) { l.Warnings = AppendWarnings(l.Warnings, w...) }

// AppendWarnings appends each of add not in ws yet.
func AppendWarnings(ws []string, add ...string) []string {
	for _, w := range add {
		if !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	return ws
}

// ItemStream is a list's items, one at a time.
type ItemStream interface {
	// Next is the next item; ok is false at the end, or with err when the stream broke.
	Next() (it Item, ok bool, err error)
	// Close ends the stream early; it may be called at any time, and more than once.
	Close()
}

// Definition is one custom resource definition as served: the definition of the first
// cluster (by name) that serves it, never modified, and every cluster that serves it.
type Definition struct {
	Def      *apiextensionsv1.CustomResourceDefinition
	From     string
	Clusters []string // sorted
}

// Drain reads the rest of l's stream into l.Items, and closes it.
func Drain(l *List) error {
	if l.More == nil {
		return nil
	}
	defer l.More.Close()
	for {
		it, ok, err := l.More.Next()
		if err != nil {
			return err
		}
		if !ok {
			l.More = nil
			return nil
		}
		l.Items = append(l.Items, it)
	}
}
