package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
)

// watchClient is what a reflector does against the daemon's HTTP API: list every page, watch
// from the list's resourceVersion, follow bookmarks, resume a broken stream from the last
// position, and relist when told 410 Expired. Its state is key → uid/resourceVersion.
type watchClient struct {
	base     string // http://host:port
	resource string
	query    url.Values // extra filters (cluster=…)

	mu      sync.Mutex
	state   map[string]string
	lists   int // completed lists (the first, then one per 410)
	expired int // 410s: on resume or as an ERROR event
	resumes int // streams that ended without a 410 and were resumed
	errs    []string

	cancel context.CancelFunc
	done   chan struct{}
}

type wireItem struct {
	Cluster string          `json:"cluster"`
	Object  json.RawMessage `json:"object"`
}

type wireObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Code     int               `json:"code"`
}

func startWatchClient(ctx context.Context, base, resource string, query url.Values) *watchClient {
	ctx, cancel := context.WithCancel(ctx)
	c := &watchClient{base: base, resource: resource, query: query, state: map[string]string{}, cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

func (c *watchClient) stop() {
	c.cancel()
	<-c.done
}

func (c *watchClient) url(q url.Values) string {
	for k, vs := range c.query {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	return c.base + "/api/v1/resources/" + c.resource + "?" + q.Encode()
}

func (c *watchClient) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 50 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

func (c *watchClient) run(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		rv, err := c.list(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.note("list: %v", err)
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		for ctx.Err() == nil {
			next, expired, err := c.watch(ctx, rv)
			if expired {
				c.mu.Lock()
				c.expired++
				c.mu.Unlock()
				break
			}
			if err != nil && ctx.Err() == nil {
				c.note("watch: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
			c.mu.Lock()
			c.resumes++
			c.mu.Unlock()
			rv = next
		}
	}
}

func (c *watchClient) list(ctx context.Context) (string, error) {
	state := map[string]string{}
	var rv, cont string
	for {
		q := url.Values{"limit": {"500"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", c.url(q), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		var page struct {
			Items           []wireItem `json:"items"`
			Continue        string     `json:"continue"`
			ResourceVersion string     `json:"resourceVersion"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return "", fmt.Errorf("list: HTTP %d: %v", resp.StatusCode, err)
		}
		for _, it := range page.Items {
			k, v, err := entry(it)
			if err != nil {
				return "", err
			}
			state[k] = v
		}
		if rv == "" {
			rv = page.ResourceVersion
		}
		if page.Continue == "" {
			break
		}
		cont = page.Continue
	}
	c.mu.Lock()
	c.state = state
	c.lists++
	c.mu.Unlock()
	return rv, nil
}

func entry(it wireItem) (string, string, error) {
	var o wireObject
	if err := json.Unmarshal(it.Object, &o); err != nil {
		return "", "", err
	}
	k := aggregate.Key{Cluster: it.Cluster, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name}
	return k.String(), string(o.Metadata.UID) + "/" + o.Metadata.ResourceVersion, nil
}

// watch follows one stream from rv. It returns the position to resume from, or expired.
func (c *watchClient) watch(ctx context.Context, rv string) (string, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url(url.Values{"watch": {"true"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"}}), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rv, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return rv, true, nil
	}
	if resp.StatusCode != 200 {
		return rv, false, fmt.Errorf("watch: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			wireItem
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return rv, false, fmt.Errorf("event %q: %w", sc.Text(), err)
		}
		switch ev.Type {
		case "BOOKMARK":
			var o wireObject
			_ = json.Unmarshal(ev.Object, &o)
			rv = o.Metadata.ResourceVersion
		case "ERROR":
			var o wireObject
			_ = json.Unmarshal(ev.Object, &o)
			if o.Code == http.StatusGone {
				return rv, true, nil
			}
			return rv, false, fmt.Errorf("error event: %s", ev.Object)
		case "ADDED", "MODIFIED", "DELETED":
			k, v, err := entry(ev.wireItem)
			if err != nil {
				return rv, false, err
			}
			c.mu.Lock()
			if ev.Type == "DELETED" {
				delete(c.state, k)
			} else {
				c.state[k] = v
			}
			c.mu.Unlock()
		default:
			return rv, false, fmt.Errorf("event type %q", ev.Type)
		}
	}
	return rv, false, sc.Err()
}

// forClusters is the client's state limited to clusters.
func (c *watchClient) forClusters(clusters []string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return inClusters(c.state, clusters)
}

func (c *watchClient) counts() (lists, expired, resumes int, errs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists, c.expired, c.resumes, append([]string(nil), c.errs...)
}
