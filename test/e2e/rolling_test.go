package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// relister is a watch client as a reflector is one, written against the wire: it lists,
// watches from the list's resourceVersion, and lists again whenever the stream ends (410, an
// error, or the replica going away). It keeps what it was told, and counts the objects it was
// told are gone (DELETED, or missing from a relist) that nobody deleted.
type relister struct {
	name     string
	mu       sync.Mutex
	state    map[string]string // cluster|ns/name → the member's resourceVersion
	invented []string          // stable objects it was told are gone
	relists  int
	last     string // why the last stream ended
}

// wireClient says how one API lists and watches.
type wireClient struct {
	// list returns the objects and the list's resourceVersion; complete is false when the
	// answer says a cluster it spans is not complete (the native API's clusters[]).
	list func() (objs map[string]string, rv string, complete bool, err error)
	// watch is the URL of a watch from rv.
	watch func(rv string) string
	// event decodes one line: its type, and the object's key and resourceVersion.
	event func(line []byte) (typ, key, rv, msg string)
}

func (e *scaleEnv) relist(name string, r replica, c wireClient) *relister {
	rl := &relister{name: name, state: map[string]string{}}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			objs, rv, complete, err := c.list()
			if err != nil || !complete {
				// 429 while a cluster is moving, or the replica restarting: as a reflector,
				// try again a moment later, keeping what we have.
				time.Sleep(200 * time.Millisecond)
				continue
			}
			rl.replace(e, objs)
			rl.follow(ctx, e, r, c.watch(rv), c.event)
		}
	}()
	return rl
}

// follow reads one watch until it ends.
func (rl *relister) follow(ctx context.Context, e *scaleEnv, r replica, u string, event func([]byte) (string, string, string, string)) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.d.URL+u, nil)
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		rl.ended(err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		rl.ended(fmt.Sprintf("%d %s", resp.StatusCode, b))
		time.Sleep(200 * time.Millisecond)
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		typ, key, rv, msg := event(sc.Bytes())
		if typ == "ERROR" {
			rl.ended("ERROR: " + msg)
			return
		}
		rl.apply(e, typ, key, rv)
	}
	rl.ended(fmt.Sprintf("stream closed (%v)", sc.Err()))
}

// replace takes a (re)list's objects: a stable object the list no longer has is one the client
// now believes deleted.
func (rl *relister) replace(e *scaleEnv, objs map[string]string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for k := range rl.state {
		if _, ok := objs[k]; !ok && e.stable(k) {
			rl.invented = append(rl.invented, "missing from a relist: "+k)
		}
	}
	rl.state = objs
	rl.relists++
}

// apply takes one watch event.
func (rl *relister) apply(e *scaleEnv, typ, key, rv string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	switch typ {
	case "ADDED", "MODIFIED":
		rl.state[key] = rv
	case "DELETED":
		if e.stable(key) {
			rl.invented = append(rl.invented, "DELETED: "+key)
		}
		delete(rl.state, key)
	}
}

// pythonRelister runs testdata/relist.py, a list-then-watch client written with the official
// Python client (Debian's python3-kubernetes, for Debian's /usr/bin/python3), against r's
// fleet view. It returns nil, saying why, when that client is not installed: `make tools`
// installs it, and CI must not go without it.
func (e *scaleEnv) pythonRelister(r replica) *relister {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import kubernetes").Run(); err != nil {
		msg := fmt.Sprintf("the official Python client is not installed (%s -c 'import kubernetes': %v); `make tools` installs Debian's python3-kubernetes", py, err)
		if os.Getenv("CI") != "" {
			e.t.Fatal(msg)
		}
		e.t.Log("skipping the Python watcher: " + msg)
		return nil
	}
	rl := &relister{name: "official Python client, fleet, on " + r.id, state: map[string]string{}}
	ctx, cancel := context.WithCancel(e.ctx)
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "relist.py"), r.d.URL, scaleToken, filepath.Join(e.tls.dir, "ca.crt"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var line struct {
				Op    string            `json:"op"`
				Items map[string]string `json:"items"`
				Type  string            `json:"type"`
				Key   string            `json:"key"`
				RV    string            `json:"rv"`
				Why   string            `json:"why"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Op {
			case "list":
				rl.replace(e, line.Items)
			case "event":
				rl.apply(e, line.Type, line.Key, line.RV)
			case "ended", "error":
				rl.ended(line.Why)
			}
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		<-done
		if e.t.Failed() && stderr.Len() > 0 {
			e.t.Logf("the Python client's stderr:\n%s", stderr.String())
		}
	})
	return rl
}

func (rl *relister) ended(why string) {
	rl.mu.Lock()
	rl.last = why
	rl.mu.Unlock()
}

func (rl *relister) snapshot() (map[string]string, []string, int) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return maps.Clone(rl.state), slices.Clone(rl.invented), rl.relists
}

// kubeWire lists and watches the Kubernetes API at prefix ("" for the fleet view,
// "/clusters/{name}" for one cluster).
func (e *scaleEnv) kubeWire(r replica, prefix string) wireClient {
	return wireClient{
		list: func() (map[string]string, string, bool, error) {
			var l scaleList
			warnings, err := e.getWarned(r, prefix+"/api/v1/configmaps", &l)
			if err != nil {
				return nil, "", false, err
			}
			if len(warnings) > 0 {
				e.t.Logf("list %s from %s at %s warned: %v", prefix+"/api/v1/configmaps", r.id, time.Now().Format("15:04:05.000"), warnings)
			}
			out := map[string]string{}
			for i := range l.Items {
				k, rv := kubeKey(&l.Items[i])
				out[k] = rv
			}
			return out, l.Metadata.ResourceVersion, true, nil
		},
		watch: func(rv string) string {
			return prefix + "/api/v1/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion=" + url.QueryEscape(rv)
		},
		event: func(line []byte) (string, string, string, string) {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if json.Unmarshal(line, &ev) != nil {
				return "", "", "", ""
			}
			if ev.Type == "ERROR" {
				var st metav1.Status
				_ = json.Unmarshal(ev.Object, &st)
				return ev.Type, "", "", fmt.Sprintf("%d %s", st.Code, st.Message)
			}
			var cm corev1.ConfigMap
			_ = json.Unmarshal(ev.Object, &cm)
			k, rv := kubeKey(&cm)
			return ev.Type, k, rv, ""
		},
	}
}

// nativeWire lists (by pages of 50) and watches the native API, of the clusters named (every
// one when none). A list whose clusters[] says one is not synced is incomplete: a careful
// client does not take its missing objects for deletes.
func (e *scaleEnv) nativeWire(r replica, clusters ...string) wireClient {
	base := url.Values{}
	for _, c := range clusters {
		base.Add("cluster", c)
	}
	return wireClient{
		list: func() (map[string]string, string, bool, error) {
			out, cont, rv := map[string]string{}, "", ""
			for {
				q := url.Values{"limit": {"50"}}
				for k, v := range base {
					q[k] = v
				}
				if cont != "" {
					q.Set("continue", cont)
				}
				var l api.List
				if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+q.Encode(), &l); err != nil {
					return nil, "", false, err
				}
				if rv == "" {
					rv = l.ResourceVersion
				}
				for _, f := range l.Clusters {
					if !f.Synced && !f.NotServed {
						return nil, "", false, nil
					}
				}
				for _, it := range l.Items {
					var om api.ObjectMeta
					_ = json.Unmarshal(it.Object, &om)
					out[it.Cluster+"|"+om.Metadata.Namespace+"/"+om.Metadata.Name] = om.Metadata.ResourceVersion
				}
				if cont = l.Continue; cont == "" {
					return out, rv, true, nil
				}
			}
		},
		watch: func(rv string) string {
			q := url.Values{"watch": {"true"}, "resourceVersion": {rv}}
			for k, v := range base {
				q[k] = v
			}
			return api.ResourcesPath + "/" + scaleResource + "?" + q.Encode()
		},
		event: func(line []byte) (string, string, string, string) {
			var ev api.WatchEvent
			if json.Unmarshal(line, &ev) != nil {
				return "", "", "", ""
			}
			if ev.Type == api.ErrorEvent {
				var er api.Error
				_ = json.Unmarshal(ev.Object, &er)
				return ev.Type, "", "", fmt.Sprintf("%d %s", er.Code, er.Message)
			}
			var om api.ObjectMeta
			_ = json.Unmarshal(ev.Object, &om)
			return ev.Type, ev.Cluster + "|" + om.Metadata.Namespace + "/" + om.Metadata.Name, om.Metadata.ResourceVersion, ""
		},
	}
}

// clusterInformer is a client-go informer on one cluster's view (/clusters/{name}) of a
// replica: it lists, watches, relists on 410, and hands its handler what changed.
type clusterInformer struct {
	name     string
	cluster  string
	store    cache.Store
	mu       sync.Mutex
	invented []string
}

func (e *scaleEnv) informOn(r replica, cluster string) *clusterInformer {
	cs, err := kubernetes.NewForConfig(e.restConfig(r.d.URL + "/clusters/" + cluster))
	if err != nil {
		e.t.Fatal(err)
	}
	ci := &clusterInformer{name: "informer on " + r.id + "/clusters/" + cluster, cluster: cluster}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				if k, _ := kubeKey(cm); e.stable(k) {
					ci.mu.Lock()
					ci.invented = append(ci.invented, k)
					ci.mu.Unlock()
				}
			}
		}},
	})
	ci.store = store
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); ctrl.RunWithContext(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return ci
}

func (ci *clusterInformer) state() map[string]string {
	out := map[string]string{}
	for _, obj := range ci.store.List() {
		k, rv := kubeKey(obj.(*corev1.ConfigMap))
		out[k] = rv
	}
	return out
}

// TestRollingRestart restarts each of three sharded replicas in turn (SIGTERM, then the same
// replica again at the same address), as a rolling update of the Deployment does, while
// ConfigMaps are created, updated and deleted in every member. Watches of every kind stay open
// throughout and relist whenever they end: fleet-wide and /clusters/{name} watches of the
// Kubernetes API, fleet-wide and cluster= watches of the native API, a client-go Reflector on
// the fleet view of each replica, and a client-go informer on each member's /clusters/{name}.
// Every one must end equal to the API servers, and none may be told that an object nobody
// deleted is gone. It reports how long each cluster was not served and how often each watcher
// relisted.
func TestRollingRestart(t *testing.T) {
	e, _ := newScaleEnv(t, 5)
	e.stable = func(key string) bool { return strings.Contains(key, "|"+scaleNS+"/cm-") }
	addrs := map[string]string{}
	var rs []replica
	for _, id := range []string{"r1", "r2", "r3"} {
		addrs[id] = harness.FreePort(t)
		rs = append(rs, e.startAt(id, addrs[id]))
	}
	e.settled("every member owned and synced", rs, nil, 2*time.Minute)
	e.equalTruth("before the rolling restart", rs, time.Minute)

	fos := []*follower{e.follow(rs[0]), e.follow(rs[1]), e.follow(rs[2])}
	var informers []*clusterInformer
	for i, m := range e.members {
		informers = append(informers, e.informOn(rs[i%len(rs)], m))
	}
	m0, m1 := e.members[0], e.members[1]
	relisters := []*relister{
		e.relist("Kubernetes API, fleet, on r1", rs[0], e.kubeWire(rs[0], "")),
		e.relist("Kubernetes API, fleet, on r2", rs[1], e.kubeWire(rs[1], "")),
		e.relist("Kubernetes API, /clusters/"+m0+", on r3", rs[2], e.kubeWire(rs[2], "/clusters/"+m0)),
		e.relist("native API, fleet, on r2", rs[1], e.nativeWire(rs[1])),
		e.relist("native API, cluster="+m1+", on r3", rs[2], e.nativeWire(rs[2], m1)),
	}
	if py := e.pythonRelister(rs[0]); py != nil {
		relisters = append(relisters, py)
	}
	e.followersEqualTruth("watchers started", fos, time.Minute)

	// How long each member goes without a replica that serves it synced, sampled from a
	// replica that is not restarting.
	restarting := make(chan string, 1)
	unserved := map[string]time.Duration{}
	var sampleMu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(e.ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		cur, last := "", time.Now()
		for sampleCtx.Err() == nil {
			select {
			case cur = <-restarting:
			default:
			}
			time.Sleep(100 * time.Millisecond)
			now := time.Now()
			var from replica
			for _, r := range rs {
				if r.id != cur {
					from = r
					break
				}
			}
			var cl api.Clusters
			served := map[string]bool{}
			if e.get(from, api.ClustersPath, &cl) == nil {
				for _, c := range cl.Clusters {
					served[c.Name] = c.State == "Synced"
				}
			}
			sampleMu.Lock()
			for _, m := range e.members {
				if !served[m] {
					unserved[m] += now.Sub(last)
				}
			}
			sampleMu.Unlock()
			last = now
		}
	}()

	w := e.writeOps(5, true)
	time.Sleep(2 * time.Second)
	readsBefore := e.memberReads()
	e.logMemberReads("to start the 3 replicas", map[string]fleet.Reads{}, readsBefore)
	for i, r := range rs {
		restarting <- r.id
		start := time.Now()
		if err := r.d.Stop(t); err != nil {
			t.Errorf("%s: SIGTERM: %v", r.id, err)
		}
		rs[i] = e.startAt(r.id, addrs[r.id])
		e.settled("every member owned and synced after restarting "+r.id, rs, nil, 2*time.Minute)
		t.Logf("%s restarted and the fleet settled in %s", r.id, time.Since(start).Round(10*time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	// Each cluster moves once or twice; each move hands the cache over, so the members serve
	// no full list (at most one of each cluster, the goal, when a handover falls back).
	if n := e.logMemberReads("during the rolling restart", readsBefore, e.memberReads()); n > len(e.members) {
		t.Errorf("the rolling restart cost the members %d full lists of %d clusters: more than one of the fleet", n, len(e.members))
	}
	w.end()
	stopSampling()
	<-sampled
	t.Logf("writes during the rolling restart: %d (failed: %d)", w.writes.Load(), w.errs.Load())

	e.equalTruth("after the rolling restart", rs, time.Minute)
	e.followersEqualTruth("after the rolling restart", fos, time.Minute)
	harness.WaitFor(t, "every informer and relisting watcher equal to the API servers", time.Minute, func() bool {
		truth := e.truth()
		for _, ci := range informers {
			if len(harness.Diff(onlyCluster(truth, ci.cluster), ci.state())) > 0 {
				return false
			}
		}
		for _, rl := range relisters {
			want := truth
			switch {
			case strings.Contains(rl.name, "/clusters/"+m0):
				want = onlyCluster(truth, m0)
			case strings.Contains(rl.name, "cluster="+m1):
				want = onlyCluster(truth, m1)
			}
			got, _, _ := rl.snapshot()
			if len(harness.Diff(want, got)) > 0 {
				return false
			}
		}
		return true
	})
	for _, fo := range fos {
		if n := fo.invented.Load(); n > 0 {
			t.Errorf("the Reflector on %s was told %d times that a ConfigMap nobody deleted is gone", fo.r.id, n)
		}
	}
	for _, ci := range informers {
		ci.mu.Lock()
		if len(ci.invented) > 0 {
			t.Errorf("%s: %d deletes of ConfigMaps nobody deleted, e.g. %v", ci.name, len(ci.invented), ci.invented[:min(3, len(ci.invented))])
		}
		ci.mu.Unlock()
	}
	for _, rl := range relisters {
		_, invented, relists := rl.snapshot()
		if len(invented) > 0 {
			t.Errorf("%s: %d deletes of ConfigMaps nobody deleted, e.g. %v", rl.name, len(invented), invented[:min(3, len(invented))])
		}
		t.Logf("%s: listed %d times (1 + relists)", rl.name, relists)
	}
	sampleMu.Lock()
	var lines []string
	for _, m := range e.members {
		lines = append(lines, fmt.Sprintf("%s %.1fs", m, unserved[m].Seconds()))
	}
	sampleMu.Unlock()
	sort.Strings(lines)
	t.Logf("time each member was not served synced during the rolling restart: %s", strings.Join(lines, ", "))
}

// onlyCluster keeps the keys of one cluster.
func onlyCluster(m map[string]string, cluster string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, cluster+"|") {
			out[k] = v
		}
	}
	return out
}
