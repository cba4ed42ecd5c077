package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
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
	"github.com/multicache/multicache/pkg/client"
	"github.com/multicache/multicache/pkg/storage/peer"
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
	// list returns the objects and the list's resourceVersion. A list answered is whole: both
	// APIs refuse (429, 503) a list that spans a cluster they cannot answer for now.
	list func() (objs map[string]string, rv string, err error)
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
			objs, rv, err := c.list()
			if err != nil {
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
		list: func() (map[string]string, string, error) {
			var l scaleList
			warnings, err := e.getWarned(r, prefix+"/api/v1/configmaps", &l)
			if err != nil {
				return nil, "", err
			}
			if len(warnings) > 0 {
				e.t.Logf("list %s from %s at %s warned: %v", prefix+"/api/v1/configmaps", r.id, time.Now().Format("15:04:05.000"), warnings)
			}
			out := map[string]string{}
			for i := range l.Items {
				k, rv := kubeKey(&l.Items[i])
				out[k] = rv
			}
			return out, l.Metadata.ResourceVersion, nil
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
// one when none), trusting every list answered as whole, as pkg/client does.
func (e *scaleEnv) nativeWire(r replica, clusters ...string) wireClient {
	base := url.Values{}
	for _, c := range clusters {
		base.Add("cluster", c)
	}
	return wireClient{
		list: func() (map[string]string, string, error) {
			out, cont, rv := map[string]string{}, "", ""
			for {
				q := url.Values{"limit": {fmt.Sprint(max(50, e.page))}}
				for k, v := range base {
					q[k] = v
				}
				if cont != "" {
					q.Set("continue", cont)
				}
				var l api.List
				if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+q.Encode(), &l); err != nil {
					return nil, "", err
				}
				if rv == "" {
					rv = l.ResourceVersion
				}
				// A 200 is whole: while a cluster it spans is not complete where it is
				// answered, or has no live owner, the answer is 429 or 503 (an error here).
				for _, it := range l.Items {
					var om api.ObjectMeta
					_ = json.Unmarshal(it.Object, &om)
					out[it.Cluster+"|"+om.Metadata.Namespace+"/"+om.Metadata.Name] = om.Metadata.ResourceVersion
				}
				if cont = l.Continue; cont == "" {
					return out, rv, nil
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

// service stands for a Kubernetes Service in front of one replica of a Deployment: clients
// reach the replica through its fixed address, a TCP forwarder to whichever replica is behind
// it now. A rolling update puts a new replica (a new Pod: a new identity and address) behind
// it; a connection keeps the replica it was opened to until that replica closes it.
type service struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
}

func newService(t *testing.T, target string) *service {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			to := s.target
			s.mu.Unlock()
			go forward(c, to)
		}
	}()
	return s
}

// point puts the replica at target behind the service.
func (s *service) point(target string) {
	s.mu.Lock()
	s.target = target
	s.mu.Unlock()
}

// forward copies c to and from a new connection to target until either side closes.
func forward(c net.Conn, target string) {
	defer c.Close()
	b, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
}

// behind is the replica clients see at s: r's credentials and client, s's address.
func (s *service) behind(name string, r replica) replica {
	d := *r.d
	d.URL = "https://" + s.ln.Addr().String()
	return replica{id: name, d: &d}
}

// TestRollingRestart updates each of three sharded replicas in turn as a Deployment's rolling
// update does: a new replica with a new identity and a new address starts beside the old one,
// the Service in front of them (see service) moves to it, then the old one stops (SIGTERM),
// while ConfigMaps are created, updated and deleted in every member. Clients use the Services
// only, and stay open throughout, relisting whenever they must: fleet-wide and
// /clusters/{name} watches of the Kubernetes API, fleet-wide and cluster= watches of the native
// API, pkg/client's Follow on the native API, a client-go Reflector on the fleet view behind
// each Service, and a client-go informer on each member's /clusters/{name}. Every one must end
// equal to the API servers, and none may be told that an object nobody deleted is gone. It
// reports how long each cluster was not served and how often each watcher relisted.
func TestRollingRestart(t *testing.T) {
	e, _ := newScaleEnv(t, 5)
	rollingRestart(t, e, rollOptions{writes: 5, python: true})
}

// TestRollingRestartAtWidth is TestRollingRestart over many clusters: the 4 member API servers
// are each seen through MULTICACHE_E2E_ROLL_ALIASES clusters of their own (`make
// e2e-roll-wide`: 250 each, 1,000 clusters), as S2 sees its servers. A write is then an event
// in each of its server's aliases, so writes run at MULTICACHE_E2E_ROLL_WRITES a second per
// server (default 2: 2,000 events a second over the fleet); client-go informers run on 4 of the
// clusters' /clusters/{name}, and the Python client is left out. MULTICACHE_E2E_ROLL_ARGS
// adds flags to every replica (--max-warmups=16). Opt-in: it takes minutes.
func TestRollingRestartAtWidth(t *testing.T) {
	aliases := harness.EnvInt("MULTICACHE_E2E_ROLL_ALIASES", 0)
	if aliases <= 0 {
		t.Skip("opt-in: set MULTICACHE_E2E_ROLL_ALIASES to the clusters each member API server is seen through (make e2e-roll-wide: 250, 1,000 clusters)")
	}
	e, _ := newAliasedScaleEnv(t, 5, aliases)
	e.page = 500
	e.args = strings.Fields(os.Getenv("MULTICACHE_E2E_ROLL_ARGS"))
	rollingRestart(t, e, rollOptions{writes: harness.EnvInt("MULTICACHE_E2E_ROLL_WRITES", 2), informers: 4})
}

// rollOptions shape a rolling restart's load.
type rollOptions struct {
	writes    int  // a second, in each member API server
	informers int  // client-go informers on members' /clusters/{name}, spread over them; 0: one on each
	python    bool // a relisting watch of the Python client too (when installed)
	// from, when set, is the daemon binary of the release the replicas run before the roll
	// (harness.BinaryAt): the roll is then an update to this tree's.
	from string
}

// previousRelease is the last commit of the previous release's peer envelope (version 3,
// peer.OldestProtocolVersion), the release a rolling update comes from.
const previousRelease = "07e2257b2dc0b843262e72eb66cf5c0182f20412"

// TestRollingUpdateFromThePreviousRelease is TestRollingRestart from replicas of the previous
// release (previousRelease's daemon, built from this checkout's history) to this tree's, with
// the same clients, writes and checks. While the releases are mixed, every replica of either
// release answers the Kubernetes API's lists, whole and paged, equal to the API servers (each
// release answers the other's envelope calls in the caller's version), and a new replica
// answers a native list that spans a cluster an old one owns 503 to retry (the previous
// envelope cannot count its total), never without that cluster.
func TestRollingUpdateFromThePreviousRelease(t *testing.T) {
	from := harness.BinaryAt(t, previousRelease)
	e, _ := newScaleEnv(t, 5)
	rollingRestart(t, e, rollOptions{writes: 5, from: from})
}

// spread picks n of xs, evenly apart; all of them when n is 0 or not less than len(xs).
func spread(xs []string, n int) []string {
	if n <= 0 || n >= len(xs) {
		return xs
	}
	out := make([]string, n)
	for i := range out {
		out[i] = xs[i*len(xs)/n]
	}
	return out
}

func rollingRestart(t *testing.T, e *scaleEnv, o rollOptions) {
	// Waits grow with the fleet: every replica lists and syncs every cluster it takes.
	within := func(d time.Duration) time.Duration { return d + time.Duration(len(e.members))*200*time.Millisecond }
	e.stable = func(key string) bool { return strings.Contains(key, "|"+scaleNS+"/cm-") }
	var rs, fronts []replica
	var svcs []*service
	e.bin = o.from
	for _, id := range []string{"r1", "r2", "r3"} {
		addr := harness.FreePort(t)
		r := e.startAt(id, addr)
		rs = append(rs, r)
		svc := newService(t, addr)
		svcs = append(svcs, svc)
		fronts = append(fronts, svc.behind("service of "+id, r))
	}
	e.bin = ""          // replicas started from here on are this tree's
	var rsMu sync.Mutex // rs changes as replicas are replaced; the sampler reads it
	e.settled("every member owned and synced", rs, nil, within(2*time.Minute))
	e.equalTruth("before the rolling restart", fronts, within(time.Minute))

	fos := []*follower{e.follow(fronts[0]), e.follow(fronts[1]), e.follow(fronts[2])}
	var informers []*clusterInformer
	for i, m := range spread(e.members, o.informers) {
		informers = append(informers, e.informOn(fronts[i%len(fronts)], m))
	}
	// Two members of different API servers when they are aliased.
	m0, m1 := e.members[0], e.members[len(e.members)-1]
	relisters := []*relister{
		e.relist("Kubernetes API, fleet, via the first Service", fronts[0], e.kubeWire(fronts[0], "")),
		e.relist("Kubernetes API, fleet, via the second Service", fronts[1], e.kubeWire(fronts[1], "")),
		e.relist("Kubernetes API, /clusters/"+m0+", via the third Service", fronts[2], e.kubeWire(fronts[2], "/clusters/"+m0)),
		e.relist("native API, fleet, via the second Service", fronts[1], e.nativeWire(fronts[1])),
		e.relist("native API, cluster="+m1+", via the third Service", fronts[2], e.nativeWire(fronts[2], m1)),
		e.followNative("pkg/client Follow, native API, fleet, via the first Service", fronts[0]),
	}
	if o.python {
		if py := e.pythonRelister(fronts[0]); py != nil {
			relisters = append(relisters, py)
		}
	}
	e.followersEqualTruth("watchers started", fos, within(time.Minute))
	// Every wire client has listed, and watches: the roll goes through their watches.
	harness.WaitFor(t, "every relisting watcher listed once", within(time.Minute), func() bool {
		for _, rl := range relisters {
			if _, _, relists := rl.snapshot(); relists == 0 {
				return false
			}
		}
		return true
	})

	// How long each member goes without a replica that serves it synced, sampled from a
	// replica that is not stopping.
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
			rsMu.Lock()
			for _, r := range rs {
				if r.id != cur {
					from = r
					break
				}
			}
			rsMu.Unlock()
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

	w := e.writeOps(o.writes, true)
	time.Sleep(2 * time.Second)
	readsBefore := e.memberReads()
	e.logMemberReads("to start the 3 replicas", map[string]fleet.Reads{}, readsBefore)
	for i := range rs {
		rsMu.Lock()
		old := rs[i]
		rsMu.Unlock()
		start := time.Now()
		// The new Pod: a new identity (and peer certificate) and a new address, beside the old.
		addr := harness.FreePort(t)
		next := e.startAt(old.id+"-next", addr)
		rsMu.Lock()
		rs = append(rs, next)
		rsMu.Unlock()
		e.settled("every member owned and synced with "+next.id+" beside "+old.id, rs, nil, within(2*time.Minute))
		svcs[i].point(addr)
		restarting <- old.id
		if err := old.d.Stop(t); err != nil {
			t.Errorf("%s: SIGTERM: %v", old.id, err)
		}
		rsMu.Lock()
		rs = slices.DeleteFunc(rs, func(r replica) bool { return r.id == old.id || r.id == next.id })
		rs = slices.Insert(rs, i, next)
		rsMu.Unlock()
		holders := e.settled("every member owned and synced after "+old.id+" stopped", rs, nil, within(2*time.Minute))
		t.Logf("%s replaced by %s and the fleet settled in %s", old.id, next.id, time.Since(start).Round(10*time.Millisecond))
		if o.from != "" && i < len(rs)-1 {
			rsMu.Lock()
			updated, olds := slices.Clone(rs[:i+1]), slices.Clone(rs[i+1:])
			rsMu.Unlock()
			// The answers are compared with the API servers' lists while no write runs
			// (the roll itself ran under them).
			func() {
				w.hold()
				defer w.release()
				e.mixedReleases(updated, olds, holders, within(time.Minute))
			}()
		}
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

	e.equalTruth("after the rolling restart", rs, within(time.Minute))
	e.equalTruth("after the rolling restart, through the Services", fronts, within(time.Minute))
	e.followersEqualTruth("after the rolling restart", fos, within(time.Minute))
	harness.WaitFor(t, "every informer and relisting watcher equal to the API servers", within(time.Minute), func() bool {
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
	var gaps []time.Duration
	for _, m := range e.members {
		lines = append(lines, fmt.Sprintf("%s %.1fs", m, unserved[m].Seconds()))
		gaps = append(gaps, unserved[m])
	}
	sampleMu.Unlock()
	sort.Strings(lines)
	slices.Sort(gaps)
	if len(lines) > 12 {
		never := len(gaps) - len(slices.DeleteFunc(slices.Clone(gaps), func(d time.Duration) bool { return d == 0 }))
		t.Logf("time a member was not served synced during the rolling restart, over %d members: median %.1fs, p99 %.1fs, max %.1fs; %d members never unserved",
			len(gaps), gaps[len(gaps)/2].Seconds(), gaps[len(gaps)*99/100].Seconds(), gaps[len(gaps)-1].Seconds(), never)
		return
	}
	t.Logf("time each member was not served synced during the rolling restart: %s", strings.Join(lines, ", "))
}

// mixedReleases checks the reads of replicas of two releases beside each other, this tree's
// (updated) and the previous one's (old), with holders the clusters' owners: every replica's
// Kubernetes API lists, whole and paged, equal the API servers'; an updated replica's native
// list is 503 naming the previous envelope when an old replica owns a cluster it spans, and
// answered (200) when none does.
func (e *scaleEnv) mixedReleases(updated, old []replica, holders map[string]string, within time.Duration) {
	e.t.Helper()
	e.equalTruthOf(fmt.Sprintf("%d replicas of this release beside %d of the previous one", len(updated), len(old)), append(slices.Clone(updated), old...), within, false)
	var byOld []string
	for c, h := range holders {
		if slices.ContainsFunc(old, func(r replica) bool { return r.id == h }) {
			byOld = append(byOld, c)
		}
	}
	for _, r := range updated {
		var l api.List
		err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?limit=1000", &l)
		switch {
		case len(byOld) > 0 && (err == nil || !strings.Contains(err.Error(), ": 503 ") || !strings.Contains(err.Error(), `peer protocol \"`+peer.OldestProtocolVersion+`\"`)):
			e.t.Errorf("a native list from %s, which spans %v owned by replicas of the previous release: %v; want 503 naming its peer protocol", r.id, byOld, err)
		case len(byOld) == 0 && err != nil:
			e.t.Errorf("a native list from %s, no cluster owned by a replica of the previous release: %v", r.id, err)
		}
	}
	e.t.Logf("releases mixed: clusters owned by the previous release's replicas: %v", byOld)
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

// followNative runs pkg/client's Follow on r's native API, fleet-wide: the project's own
// client, which retries an answer that says to (429 while a cluster it spans moves, 503 while
// its owner is down) and lists again on 410. What it hands its handler goes into a relister's
// state, which counts the objects it was told are gone that nobody deleted.
func (e *scaleEnv) followNative(name string, r replica) *relister {
	rl := &relister{name: name, state: map[string]string{}}
	cl, err := client.New(client.Options{Server: r.d.URL, Token: scaleToken, CAFile: filepath.Join(e.tls.dir, "ca.crt")})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		cl.Follow(ctx, scaleResource, client.Query{}, nativeFollower{e: e, rl: rl}, client.FollowOptions{OnError: func(err error) { rl.ended(err.Error()) }})
	}()
	return rl
}

// nativeFollower is Follow's handler for a relister.
type nativeFollower struct {
	e  *scaleEnv
	rl *relister
}

func nativeKey(cluster string, raw json.RawMessage) (key, rv string) {
	var om api.ObjectMeta
	_ = json.Unmarshal(raw, &om)
	return cluster + "|" + om.Metadata.Namespace + "/" + om.Metadata.Name, om.Metadata.ResourceVersion
}

func (f nativeFollower) Replace(l *api.List) {
	objs := map[string]string{}
	for _, it := range l.Items {
		k, rv := nativeKey(it.Cluster, it.Object)
		objs[k] = rv
	}
	f.rl.replace(f.e, objs)
}

func (f nativeFollower) Event(ev api.WatchEvent) {
	k, rv := nativeKey(ev.Cluster, ev.Object)
	f.rl.apply(f.e, ev.Type, k, rv)
}
