package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

// Options reach a daemon.
type Options struct {
	// Server is the daemon's URL. Default "http://127.0.0.1:8080".
	Server string
	// Token is sent as "Authorization: Bearer …" when set.
	Token string
	// CAFile is a PEM file of the CA that signed an https daemon's certificate. Default: the
	// system roots.
	CAFile string
	// HTTPClient, if set, is used as it is (CAFile is then ignored). Default: one with a 60 s
	// timeout for everything but watches.
	HTTPClient *http.Client
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client // lists, gets, clusters
	wc    *http.Client // watches: no overall timeout
}

// OptionError is a bad Options field.
type OptionError struct {
	Option string // "Server", "CAFile"
	Err    error
}

// Error names the option.
func (e *OptionError) Error() string { return "client: Options." + e.Option + ": " + e.Err.Error() }

// Unwrap is the problem with the option.
func (e *OptionError) Unwrap() error { return e.Err }

// New validates opts and returns a Client. A bad option is an *OptionError.
func New(opts Options) (*Client, error) {
	if opts.Server == "" {
		opts.Server = "http://127.0.0.1:8080"
	}
	u, err := url.Parse(strings.TrimSuffix(opts.Server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &OptionError{"Server", fmt.Errorf("%q: want http(s)://host:port", opts.Server)}
	}
	c := &Client{base: u, token: opts.Token}
	if opts.HTTPClient != nil {
		c.hc, c.wc = opts.HTTPClient, opts.HTTPClient
		return c, nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, &OptionError{"CAFile", err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &OptionError{"CAFile", fmt.Errorf("%q: no PEM certificate in it", opts.CAFile)}
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c.hc = &http.Client{Transport: t, Timeout: 60 * time.Second}
	c.wc = &http.Client{Transport: t}
	return c, nil
}

// Query narrows a list or a watch. Every set field narrows the answer.
type Query struct {
	Clusters      []string
	Namespace     string
	LabelSelector string
	// FieldSelector terms name metadata.name, metadata.namespace, spec.nodeName, status.phase
	// or an index of the resource.
	FieldSelector string
	Index, Value  string
	// Where is a CEL expression over `object` that each object must make true, such as
	// object.spec.containers.exists(c, c.image.startsWith('nginx:')).
	Where string
	// Owner keeps what is under one owner, group/Kind/namespace/name ("core" for the core
	// group), such as apps/Deployment/shop/web: the Pods of its ReplicaSets too.
	Owner string
	// SortBy orders a List by a JSONPath's first value (metadata.creationTimestamp,
	// status.containerStatuses[0].restartCount), on the daemon, descending with Desc; pages
	// continue in that order. Without it, a List is in key order (cluster, namespace, name).
	SortBy string
	Desc   bool
	// Limit is the page size of List (0: the daemon's maximum).
	Limit int
}

func (q Query) values() url.Values {
	v := url.Values{}
	for _, c := range q.Clusters {
		v.Add("cluster", c)
	}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("namespace", q.Namespace)
	set("labelSelector", q.LabelSelector)
	set("fieldSelector", q.FieldSelector)
	set("where", q.Where)
	set("owner", q.Owner)
	set("sortBy", q.SortBy)
	if q.Desc {
		v.Set("order", "desc")
	}
	if q.Index != "" {
		v.Set("index", q.Index)
		v.Set("value", q.Value)
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	return v
}

// RetryAfter is how long err says to wait before asking again: its Retry-After (a 429 while a
// cluster the answer spans is not complete on the replica that answers it, a 503 while its
// owner is down), 0 when it says nothing.
func RetryAfter(err error) time.Duration {
	var e *api.Error
	if errors.As(err, &e) {
		return time.Duration(e.RetryAfter) * time.Second
	}
	return 0
}

// IsExpired reports whether err is the daemon's 410 Expired: the position is gone; list again.
func IsExpired(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == http.StatusGone
}

// url is the daemon's URL for path, whose segments the callers have escaped already (a
// resource named "apps/v1/deployments" travels as one segment, apps%2Fv1%2Fdeployments).
func (c *Client) url(path string, q url.Values) string {
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// do sends a GET and returns the response when it is 200; any other status is an *api.Error.
func (c *Client) do(ctx context.Context, hc *http.Client, path string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path, q), nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("daemon at %s: %w", c.base, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &api.Error{}
	if json.Unmarshal(b, e) != nil || e.Message == "" {
		e = &api.Error{Code: resp.StatusCode, Reason: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && ra > 0 {
		e.RetryAfter = ra
	}
	return nil, e
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	resp, err := c.do(ctx, c.hc, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("daemon at %s: %s: %w", c.base, path, err)
	}
	return nil
}

// List returns one page of resource (a plural, kind, short name or the configured name). Pass
// the previous page's Continue as cont for the next; "" for the first.
func (c *Client) List(ctx context.Context, resource string, q Query, cont string) (*api.List, error) {
	v := q.values()
	if cont != "" {
		v.Set("continue", cont)
	}
	var l api.List
	if err := c.getJSON(ctx, api.ResourcesPath+"/"+url.PathEscape(resource), v, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ListAll returns every page of resource: the items, and the first page's resourceVersion
// (every page carries it; a watch from it misses nothing of any page) and freshness (as the
// first page saw each cluster).
func (c *Client) ListAll(ctx context.Context, resource string, q Query) (*api.List, error) {
	var all *api.List
	cont := ""
	for {
		page, err := c.List(ctx, resource, q, cont)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = page
		} else {
			all.Items = append(all.Items, page.Items...)
		}
		if page.Continue == "" {
			all.Continue = ""
			return all, nil
		}
		cont = page.Continue
	}
}

// Get returns one object. namespace is "" for a cluster-scoped object.
func (c *Client) Get(ctx context.Context, resource, cluster, namespace, name string) (*api.Item, error) {
	if namespace == "" {
		namespace = "_"
	}
	var it api.Item
	path := api.ResourcesPath + "/" + url.PathEscape(resource) + "/" + url.PathEscape(cluster) + "/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	if err := c.getJSON(ctx, path, nil, &it); err != nil {
		return nil, err
	}
	return &it, nil
}

// SummaryOptions are a summary's keys (cluster, namespace, label:<key>, field:<path>,
// index:<name>), the order of its groups (by count, most first, unless ByKey) and how many
// to keep (0: all).
type SummaryOptions struct {
	By    []string
	ByKey bool
	Limit int
}

func (opts SummaryOptions) values(q Query) url.Values {
	q.Limit = 0
	v := q.values()
	v.Set("by", strings.Join(opts.By, ","))
	if opts.ByKey {
		v.Set("sort", "key")
	}
	if opts.Limit > 0 {
		v.Set("limit", fmt.Sprint(opts.Limit))
	}
	return v
}

// WatchSummary streams summaries of resource: f gets the summary at once, then a new one
// whenever the counts change, at most once per interval (0: the daemon's default, 1s), until
// ctx ends (nil), f fails (its error) or the daemon ends the stream (an *api.Error, or io.EOF).
func (c *Client) WatchSummary(ctx context.Context, resource string, q Query, opts SummaryOptions, interval time.Duration, f func(*api.Summary) error) error {
	v := opts.values(q)
	v.Set("watch", "true")
	if interval > 0 {
		v.Set("interval", interval.String())
	}
	resp, err := c.do(ctx, c.wc, api.ResourcesPath+"/"+url.PathEscape(resource)+"/summary", v)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch ev.Type {
		case api.SummaryEvent:
			var s api.Summary
			if err := json.Unmarshal(ev.Object, &s); err != nil {
				return fmt.Errorf("summary event: %w", err)
			}
			if err := f(&s); err != nil {
				return err
			}
		case api.ErrorEvent:
			e := &api.Error{}
			if err := json.Unmarshal(ev.Object, e); err != nil {
				return fmt.Errorf("error event %s: %w", ev.Object, err)
			}
			return e
		}
	}
}

// Summarize counts the objects of resource that q selects, in groups by opts.By, on the
// daemon: nothing but the counts travels. q.Limit is not used.
func (c *Client) Summarize(ctx context.Context, resource string, q Query, opts SummaryOptions) (*api.Summary, error) {
	v := opts.values(q)
	var s api.Summary
	if err := c.getJSON(ctx, api.ResourcesPath+"/"+url.PathEscape(resource)+"/summary", v, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Clusters returns every cluster's state.
func (c *Client) Clusters(ctx context.Context) (*api.Clusters, error) {
	var cl api.Clusters
	if err := c.getJSON(ctx, api.ClustersPath, nil, &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

// Watch opens a watch of resource from resourceVersion ("" for the current objects as ADDED
// first). Read it with Next; Close it when done.
func (c *Client) Watch(ctx context.Context, resource string, q Query, resourceVersion string) (*Watch, error) {
	v := q.values()
	v.Del("limit")
	v.Set("watch", "true")
	v.Set("allowWatchBookmarks", "true")
	if resourceVersion != "" {
		v.Set("resourceVersion", resourceVersion)
	}
	resp, err := c.do(ctx, c.wc, api.ResourcesPath+"/"+url.PathEscape(resource), v)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	return &Watch{body: resp.Body, sc: sc, rv: resourceVersion}, nil
}

// Watch is an open watch stream.
type Watch struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	rv   string
}

// Next returns the next event. Bookmarks are returned too, and advance ResourceVersion. An
// ERROR event is returned as an *api.Error (IsExpired for 410); the end of the stream as
// io.EOF.
func (w *Watch) Next() (api.WatchEvent, error) {
	if !w.sc.Scan() {
		if err := w.sc.Err(); err != nil {
			return api.WatchEvent{}, err
		}
		return api.WatchEvent{}, io.EOF
	}
	var ev api.WatchEvent
	if err := json.Unmarshal(w.sc.Bytes(), &ev); err != nil {
		return ev, fmt.Errorf("watch event %q: %w", w.sc.Text(), err)
	}
	switch ev.Type {
	case api.Bookmark:
		var b api.BookmarkObject
		if err := json.Unmarshal(ev.Object, &b); err != nil {
			return ev, fmt.Errorf("bookmark %s: %w", ev.Object, err)
		}
		w.rv = b.Metadata.ResourceVersion
	case api.ErrorEvent:
		e := &api.Error{}
		if err := json.Unmarshal(ev.Object, e); err != nil {
			return ev, fmt.Errorf("error event %s: %w", ev.Object, err)
		}
		return ev, e
	}
	return ev, nil
}

// ResourceVersion is where a new watch resumes this one: the last bookmark's position (or the
// one the watch started from).
func (w *Watch) ResourceVersion() string { return w.rv }

// Close ends the stream.
func (w *Watch) Close() error { return w.body.Close() }
