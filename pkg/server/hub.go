package server

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
)

// event is one change in the fleet as a watch sends it.
type event struct {
	seq     uint64
	cluster string
	typ     string // ADDED, MODIFIED, DELETED
	obj     any
	old     any    // MODIFIED only
	rv      uint64 // 0 when unknown (tombstones): such events are never skipped
}

// hub keeps the recent events of one resource, for watches to resume from, and fans live events
// out to the watches. It is an aggregate handler: it sees what every other handler sees.
type hub struct {
	resource string
	epoch    string

	mu        sync.Mutex
	ring      []event
	start     int // index of the oldest event in ring
	n         int // events held
	seq       uint64
	applied   map[string]uint64 // per cluster: highest rv appended
	evicted   map[string]uint64 // per cluster: highest rv evicted from the ring
	watchers  map[*watcher]struct{}
	overflows int64
}

func newHub(resource, epoch string, size int) *hub {
	return &hub{resource: resource, epoch: epoch, ring: make([]event, size),
		applied: map[string]uint64{}, evicted: map[string]uint64{}, watchers: map[*watcher]struct{}{}}
}

func newEpoch() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func rvOf(obj any) uint64 {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return v
}

func (h *hub) OnAdd(cluster string, obj any, _ bool) {
	h.append(event{cluster: cluster, typ: "ADDED", obj: obj, rv: rvOf(obj)})
}

func (h *hub) OnUpdate(cluster string, oldObj, newObj any) {
	h.append(event{cluster: cluster, typ: "MODIFIED", obj: newObj, old: oldObj, rv: rvOf(newObj)})
}

func (h *hub) OnDelete(cluster string, obj any) {
	rv := rvOf(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, rv = d.Obj, 0 // the cluster left or a delete was missed: no comparable rv
	}
	h.append(event{cluster: cluster, typ: "DELETED", obj: obj, rv: rv})
}

func (h *hub) append(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	ev.seq = h.seq
	if h.n == len(h.ring) {
		old := h.ring[h.start]
		if old.rv > h.evicted[old.cluster] {
			h.evicted[old.cluster] = old.rv
		}
		h.ring[h.start] = event{}
		h.start = (h.start + 1) % len(h.ring)
		h.n--
	}
	h.ring[(h.start+h.n)%len(h.ring)] = ev
	h.n++
	if ev.rv > h.applied[ev.cluster] {
		h.applied[ev.cluster] = ev.rv
	}
	for w := range h.watchers {
		select {
		case w.ch <- ev:
		default:
			// The watch fell behind by a whole buffer: end it with 410 so the client relists
			// rather than silently missing events.
			delete(h.watchers, w)
			close(w.ch)
			h.overflows++
		}
	}
}

// appliedSnapshot returns the per-cluster highest rv seen so far.
func (h *hub) appliedSnapshot() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]uint64, len(h.applied))
	for c, v := range h.applied {
		out[c] = v
	}
	return out
}

// watcher is one watch's live feed.
type watcher struct {
	ch chan event
}

// errExpired is returned for tokens the hub cannot resume from.
type errExpired struct{ msg string }

func (e errExpired) Error() string { return e.msg }

// subscribe registers a watcher. With from != nil it also returns the kept events after from
// (per cluster, rv > from[cluster]); it fails with errExpired when some of those were evicted.
func (h *hub) subscribe(from map[string]uint64, buf int) (*watcher, []event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var replay []event
	if from != nil {
		for c, ev := range h.evicted {
			if ev > from[c] {
				return nil, nil, errExpired{fmt.Sprintf("resourceVersion too old for cluster %q: events up to %d are no longer kept; list again", c, ev)}
			}
		}
		for i := 0; i < h.n; i++ {
			ev := h.ring[(h.start+i)%len(h.ring)]
			if ev.rv == 0 || ev.rv > from[ev.cluster] {
				replay = append(replay, ev)
			}
		}
	}
	w := &watcher{ch: make(chan event, buf)}
	h.watchers[w] = struct{}{}
	return w, replay, nil
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		close(w.ch)
	}
}

// token is a resumable position: the epoch and per-cluster rvs.
type token struct {
	Epoch string            `json:"e"`
	RVs   map[string]uint64 `json:"v"`
}

func (t token) encode() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseToken(s string) (token, error) {
	var t token
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("resourceVersion %q: not a multicache token", s)
	}
	if err := json.Unmarshal(b, &t); err != nil || t.Epoch == "" {
		return t, fmt.Errorf("resourceVersion %q: not a multicache token", s)
	}
	for c := range t.RVs {
		if aggregate.ValidateClusterName(c) != nil {
			return t, fmt.Errorf("resourceVersion: bad cluster name %q", c)
		}
	}
	return t, nil
}
