package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
	"github.com/multicache/multicache/test/harness"
)

// watchClient follows a resource through the daemon's HTTP API with client.Follow, as a
// reflector would, and keeps key → uid/resourceVersion.
type watchClient struct {
	mu      sync.Mutex
	state   map[string]string
	lists   int // completed lists (the first, then one per 410)
	expired int // 410s
	errs    []string

	cancel context.CancelFunc
	done   chan struct{}
}

func startWatchClient(ctx context.Context, base, resource string, query url.Values) *watchClient {
	ctx, cancel := context.WithCancel(ctx)
	c := &watchClient{state: map[string]string{}, cancel: cancel, done: make(chan struct{})}
	cl, err := client.New(client.Options{Server: base})
	if err != nil {
		panic(err) // base is an httptest URL
	}
	q := client.Query{Clusters: query["cluster"], Limit: 500}
	go func() {
		defer close(c.done)
		cl.Follow(ctx, resource, q, c, client.FollowOptions{OnError: func(err error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if client.IsExpired(err) {
				c.expired++
			} else if len(c.errs) < 50 {
				c.errs = append(c.errs, err.Error())
			}
		}})
	}()
	return c
}

func (c *watchClient) stop() {
	c.cancel()
	<-c.done
}

func entry(cluster string, raw json.RawMessage) (string, string, error) {
	var o api.ObjectMeta
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", "", err
	}
	k := aggregate.Key{Cluster: cluster, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name}
	return k.String(), o.Metadata.UID + "/" + o.Metadata.ResourceVersion, nil
}

// Replace is client.FollowHandler's: a complete list.
func (c *watchClient) Replace(list *api.List) {
	state := map[string]string{}
	var bad error
	for _, it := range list.Items {
		k, v, err := entry(it.Cluster, it.Object)
		if err != nil {
			bad = err
			continue
		}
		state[k] = v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = state
	c.lists++
	if bad != nil {
		c.errs = append(c.errs, "list item: "+bad.Error())
	}
}

// Event is client.FollowHandler's: one change.
func (c *watchClient) Event(ev api.WatchEvent) {
	k, v, err := entry(ev.Cluster, ev.Object)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.errs = append(c.errs, fmt.Sprintf("event %s: %v", ev.Type, err))
	case ev.Type == api.Deleted:
		delete(c.state, k)
	case ev.Type == api.Added || ev.Type == api.Modified:
		c.state[k] = v
	default:
		c.errs = append(c.errs, "event type "+ev.Type)
	}
}

// InClusters is the client's state limited to clusters.
func (c *watchClient) InClusters(clusters ...string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return harness.InClusters(c.state, clusters...)
}

func (c *watchClient) counts() (lists, expired int, errs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists, c.expired, append([]string(nil), c.errs...)
}
