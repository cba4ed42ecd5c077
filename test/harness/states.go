package harness

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/verify"
)

// FinalStates is an aggregate handler that records, per object (Key string), the last state it
// was told (verify.State: uid/resourceVersion) and every call that contradicts what it was told
// before: an add of a key it holds, an update or delete of one it does not, an update that goes
// back to an older resourceVersion of the same object. Delay makes it slow.
type FinalStates struct {
	Delay time.Duration

	mu     sync.Mutex
	state  map[string]string
	adds   map[string]int
	errors []string
}

// NewFinalStates returns an empty FinalStates, slowed by delay per call.
func NewFinalStates(delay time.Duration) *FinalStates {
	return &FinalStates{Delay: delay, state: map[string]string{}, adds: map[string]int{}}
}

// StateOf is obj's verify.State.
func StateOf(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return verify.State(string(m.GetUID()), m.GetResourceVersion())
}

// KeyOf is obj's Key string in cluster.
func KeyOf(cluster string, obj any) string {
	k, err := aggregate.KeyOf(cluster, obj)
	if err != nil {
		return "bad key: " + err.Error()
	}
	return k.String()
}

// OnAdd records obj; a key already held is an inconsistency.
func (s *FinalStates) OnAdd(cluster string, obj any, _ bool) {
	time.Sleep(s.Delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := KeyOf(cluster, obj)
	if _, dup := s.state[k]; dup {
		s.errors = append(s.errors, "add of a key already held: "+k)
	}
	s.state[k] = StateOf(obj)
	s.adds[k]++
}

// OnUpdate records obj; an unknown key or an older resourceVersion is an inconsistency.
func (s *FinalStates) OnUpdate(cluster string, _, obj any) {
	time.Sleep(s.Delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := KeyOf(cluster, obj)
	prev, ok := s.state[k]
	if !ok {
		s.errors = append(s.errors, "update of an unknown key: "+k)
	}
	now := StateOf(obj)
	pu, prv, _ := strings.Cut(prev, "/")
	nu, nrv, _ := strings.Cut(now, "/")
	if ok && pu == nu && olderRV(nrv, prv) {
		s.errors = append(s.errors, fmt.Sprintf("update went back for %s: %s after %s", k, nrv, prv))
	}
	s.state[k] = now
}

// OnDelete forgets obj; an unknown key is an inconsistency.
func (s *FinalStates) OnDelete(cluster string, obj any) {
	time.Sleep(s.Delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := KeyOf(cluster, obj)
	if _, ok := s.state[k]; !ok {
		s.errors = append(s.errors, "delete of an unknown key: "+k)
	}
	delete(s.state, k)
}

// olderRV compares etcd resourceVersions of one object (one etcd): shorter is older.
func olderRV(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// InClusters is the recorded state of the objects in clusters (every cluster when none).
func (s *FinalStates) InClusters(clusters ...string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return inClusters(s.state, clusters)
}

// Adds is how often each key was added.
func (s *FinalStates) Adds() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.adds))
	for k, n := range s.adds {
		out[k] = n
	}
	return out
}

// Problems lists every inconsistent call so far.
func (s *FinalStates) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errors...)
}

func inClusters(m map[string]string, clusters []string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if len(clusters) == 0 {
			out[k] = v
			continue
		}
		for _, c := range clusters {
			if strings.HasPrefix(k, c+aggregate.Separator) {
				out[k] = v
			}
		}
	}
	return out
}

// InClusters is the part of a key → state map whose keys are in clusters (every key when none).
func InClusters(m map[string]string, clusters ...string) map[string]string {
	return inClusters(m, clusters)
}

// Truth is what servers list of gvr, as Key string → verify.State.
func Truth(truth map[aggregate.Key]string) map[string]string {
	out := make(map[string]string, len(truth))
	for k, v := range truth {
		out[k.String()] = v
	}
	return out
}

// Diff lists how got differs from want (key → state maps), sorted: missing, extra and stale
// keys, through verify.Diff.
func Diff(want, got map[string]string) []string {
	w, g := map[aggregate.Key]string{}, map[aggregate.Key]string{}
	for k, v := range want {
		if key, err := aggregate.ParseKey(k); err == nil {
			w[key] = v
		}
	}
	for k, v := range got {
		if key, err := aggregate.ParseKey(k); err == nil {
			g[key] = v
		}
	}
	var out []string
	for _, d := range verify.Diff("", g, w).Diverged {
		out = append(out, d.String())
	}
	return out
}
