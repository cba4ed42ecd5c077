package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// auditPolicy logs list and watch requests, their metadata only, when the response is complete
// (lists) or has started (watches, which last).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["list", "watch"]
- level: None
`

func (c *Cluster) auditArgs() []string {
	if !c.AuditReads {
		return nil
	}
	return []string{
		"--audit-policy-file=" + filepath.Join(c.Dir, "audit-policy.yaml"),
		"--audit-log-path=" + filepath.Join(c.Dir, "audit.log"),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0",
	}
}

// Reads counts the reads of whole collections an API server served.
type Reads struct {
	// Lists are LIST requests without a continue token: each starts a full list (a paginated
	// one goes on in ListPages).
	Lists int
	// ListPages are LIST requests with a continue token.
	ListPages int
	// Probes are LIST requests with limit=1 (a count's estimate, one object): not in Lists.
	Probes int
	// ExactLists are LIST requests at an exact resourceVersion (resourceVersionMatch=Exact):
	// client-go's watch-list inconsistency detector (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR)
	// sends one after each streamed list, a test's check rather than the client's cost. Not
	// in Lists.
	ExactLists int
	// WatchLists are watches that begin with the collection's state (sendInitialEvents=true):
	// a full list streamed.
	WatchLists int
	// Watches are the other watches.
	Watches int
	// Full counts Lists plus WatchLists by resource.
	Full map[string]int
}

// ReadsBy counts, from the cluster's audit log (Options.AuditReads), the list and watch
// requests of clients whose User-Agent starts with agent, over the API server's life so far.
func (c *Cluster) ReadsBy(agent string) (Reads, error) {
	out := Reads{Full: map[string]int{}}
	if !c.AuditReads {
		return out, fmt.Errorf("cluster %q: its API server does not audit reads (Options.AuditReads)", c.Name)
	}
	f, err := os.Open(filepath.Join(c.Dir, "audit.log"))
	if err != nil {
		return out, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Stage      string `json:"stage"`
			Verb       string `json:"verb"`
			UserAgent  string `json:"userAgent"`
			RequestURI string `json:"requestURI"`
			ObjectRef  struct {
				Resource string `json:"resource"`
				APIGroup string `json:"apiGroup"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !strings.HasPrefix(ev.UserAgent, agent) {
			continue
		}
		u, err := url.Parse(ev.RequestURI)
		if err != nil {
			continue
		}
		q := u.Query()
		resource := ev.ObjectRef.Resource
		if ev.ObjectRef.APIGroup != "" {
			resource += "." + ev.ObjectRef.APIGroup
		}
		switch {
		case ev.Verb == "list" && ev.Stage == "ResponseComplete" && q.Get("continue") != "":
			out.ListPages++
		case ev.Verb == "list" && ev.Stage == "ResponseComplete" && q.Get("limit") == "1":
			out.Probes++
		case ev.Verb == "list" && ev.Stage == "ResponseComplete" && q.Get("resourceVersionMatch") == "Exact":
			out.ExactLists++
		case ev.Verb == "list" && ev.Stage == "ResponseComplete":
			out.Lists++
			out.Full[resource]++
		case ev.Verb == "watch" && ev.Stage == "ResponseStarted" && q.Get("sendInitialEvents") == "true":
			out.WatchLists++
			out.Full[resource]++
		case ev.Verb == "watch" && ev.Stage == "ResponseStarted":
			out.Watches++
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("cluster %q: audit log: %w", c.Name, err)
	}
	return out, nil
}

// Sub is r minus an earlier count of the same log.
func (r Reads) Sub(earlier Reads) Reads {
	out := Reads{Lists: r.Lists - earlier.Lists, ListPages: r.ListPages - earlier.ListPages, Probes: r.Probes - earlier.Probes, ExactLists: r.ExactLists - earlier.ExactLists, WatchLists: r.WatchLists - earlier.WatchLists,
		Watches: r.Watches - earlier.Watches, Full: map[string]int{}}
	for k, v := range r.Full {
		if d := v - earlier.Full[k]; d != 0 {
			out.Full[k] = d
		}
	}
	return out
}
