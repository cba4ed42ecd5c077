package fleet

import (
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// WriteLatency collects write → event delays of the loader's Churn writes, from the
// WrittenAtKey stamp each write carries. It is safe for concurrent use.
type WriteLatency struct {
	mu sync.Mutex
	d  []time.Duration
	by map[string]time.Duration // cluster/namespace/name@resourceVersion → delay
}

// Observe records obj's delay since it was written. Initial-list adds and objects without a
// stamp are ignored.
func (l *WriteLatency) Observe(obj any, initial bool) { l.ObserveIn("", obj, initial) }

// ObserveIn is Observe for an event of cluster; it also records the delay by event, for
// PairedDiff.
func (l *WriteLatency) ObserveIn(cluster string, obj any, initial bool) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || initial {
		return
	}
	ns, err := strconv.ParseInt(cm.Data[WrittenAtKey], 10, 64)
	if err != nil {
		return
	}
	d := time.Since(time.Unix(0, ns))
	l.mu.Lock()
	l.d = append(l.d, d)
	if cluster != "" {
		if l.by == nil {
			l.by = map[string]time.Duration{}
		}
		l.by[cluster+"/"+cm.Namespace+"/"+cm.Name+"@"+cm.ResourceVersion] = d
	}
	l.mu.Unlock()
}

// Reset forgets what was recorded.
func (l *WriteLatency) Reset() {
	l.mu.Lock()
	l.d, l.by = nil, nil
	l.mu.Unlock()
}

// PairedDiff is, for every event both a and b recorded with ObserveIn, a's delay minus b's,
// sorted: what a adds to the same event.
func PairedDiff(a, b *WriteLatency) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Duration
	for k, da := range a.by {
		if db, ok := b.by[k]; ok {
			out = append(out, da-db)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// N is how many delays were recorded.
func (l *WriteLatency) N() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// Pct is the p-th percentile delay, rounded to 100 µs; 0 when nothing was recorded.
func (l *WriteLatency) Pct(p int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}
