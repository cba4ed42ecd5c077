package clusterset

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// State is where a cluster or a resource stands.
type State string

const (
	// Pending: known, not started.
	Pending State = "Pending"
	// Syncing: started, initial list not complete.
	Syncing State = "Syncing"
	// Synced: the cache holds what the server lists and follows its watch.
	Synced State = "Synced"
	// Degraded: was synced, now failing (the cache serves its last state, which may be stale).
	Degraded State = "Degraded"
	// Failed: never synced, and failing; Error says why.
	Failed State = "Failed"
	// NotServed: the cluster does not serve this resource (a CRD it lacks). Fails nothing.
	NotServed State = "NotServed"
	// Removed: the cluster left this replica (its source dropped it, or handed it to another
	// replica); only StatusChange reports it (To), as its last
	// change.
	Removed State = "Removed"
)

// severity orders states for the cluster summary; NotServed counts as fine.
var severity = map[State]int{Synced: 0, NotServed: 0, Pending: 1, Syncing: 2, Degraded: 3, Failed: 4}

// ResourceStatus is one cluster × resource.
type ResourceStatus struct {
	Resource string // as configured
	GVR      string // as resolved in this cluster, "" until resolved
	Mode     Mode   // the decoding in use
	// Group, Version, Kind, Namespaced and Aliases (plural, singular, kind, short names) come
	// from this cluster's discovery once resolved.
	Group, Version, Kind string
	Namespaced           bool
	Aliases              []string
	// Plural, Singular, ShortNames and Categories are the resource's names in this cluster's
	// discovery; PrinterColumns are its CustomResourceDefinition's additionalPrinterColumns
	// for Version (nil for built-in resources, and when the definition cannot be read).
	Plural, Singular       string
	ShortNames, Categories []string
	PrinterColumns         []apiextensionsv1.CustomResourceColumnDefinition
	// Definition is a custom resource's CustomResourceDefinition as this cluster served it when
	// the resource was last resolved (kept across restarts until read again), without its
	// versions' schemas and managedFields; nil for built-in and aggregated resources, and when
	// it could never be read. It is shared: never modify it.
	Definition *apiextensionsv1.CustomResourceDefinition `json:"-"`
	State      State
	// Since is when the resource entered State.
	Since    time.Time
	Error    string    // the last error, in words; empty when healthy
	LastSync time.Time // the last time the cache was known in step with the server
	// SyncDuration is how long the initial list took (0 until synced).
	SyncDuration time.Duration
	// WatchRestarts counts the list and watch calls that failed (the reflector retries each);
	// an error that ends a watch stream already open counts only if the call after it fails too.
	WatchRestarts int64
	// Progress is how far the latest initial list or relist got.
	Progress SyncProgress
}

// ClusterStatus is one cluster and its resources.
type ClusterStatus struct {
	Name     string
	Origin   string
	State    State
	Error    string
	LastSync time.Time // the oldest LastSync of its synced resources
	// Restarts counts how often the cluster's stacks were rebuilt because its server or
	// credentials changed in the source.
	Restarts int
	// Waiting: the source holds the cluster back (ClusterConfig.Waiting, in Error); it runs
	// nothing.
	Waiting   bool
	Resources []ResourceStatus
}

// Resolving reports whether cs may still resolve one of resources: it has no status for it
// yet, or one pending or syncing without a kind (its discovery has not answered). A resource
// missing from the cluster's catalog may then still come: a request for it is to be retried,
// not answered 404.
func (cs ClusterStatus) Resolving(resources []string) bool {
	for _, res := range resources {
		i := slices.IndexFunc(cs.Resources, func(rs ResourceStatus) bool { return rs.Resource == res })
		if i < 0 {
			return true
		}
		if rs := cs.Resources[i]; rs.Kind == "" && (rs.State == Pending || rs.State == Syncing) {
			return true
		}
	}
	return false
}

// StatusChange notifies that a cluster's or a resource's state changed. Resource is empty for
// cluster-level changes.
type StatusChange struct {
	Cluster, Resource string
	From, To          State
	Error             string
}

// describe turns an error into words a user understands. It never includes credentials:
// API errors carry none, and URLs are reduced to scheme and host.
func describe(err error) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	// client-go reports an exec credential plugin that failed as the request's error; the
	// server was never asked. The plugin's own words go to the daemon's standard error.
	if _, after, found := strings.Cut(err.Error(), "getting credentials: "); found {
		return "credentials: " + after + " (its own error output is in the daemon's log)"
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return "unauthorized (401): the credentials were rejected"
	case apierrors.IsForbidden(err):
		return "forbidden (403): " + apiMessage(err)
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return "not served (404): the server does not serve this resource"
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return "resourceVersion expired (410): relisting"
	case apierrors.IsTooManyRequests(err):
		return "throttled (429): " + apiMessage(err)
	case errors.As(err, &ue):
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Scheme + "://" + u.Host
		}
		var ne net.Error
		if errors.As(ue.Err, &ne) && ne.Timeout() {
			return "unreachable: " + host + ": timed out"
		}
		return "unreachable: " + host + ": " + rootCause(ue.Err)
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return fmt.Sprintf("server error (%d): %s", se.Status().Code, apiMessage(err))
	}
	return rootCause(err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i > 0 && strings.Contains(s, "dial tcp") {
		return strings.TrimSpace(s[i+2:])
	}
	return s
}

// statusBoard fans out status changes to subscribers.
type statusBoard struct {
	mu   sync.Mutex
	subs map[chan StatusChange]struct{}
}

func (b *statusBoard) publish(c StatusChange) {
	if c.From == c.To {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- c:
		default: // the subscriber is behind: it misses this one (Status has the current state)
		}
	}
}

func (b *statusBoard) subscribe(buf int) (<-chan StatusChange, func()) {
	ch := make(chan StatusChange, buf)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[chan StatusChange]struct{}{}
	}
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, ch)
			b.mu.Unlock()
		})
	}
}
