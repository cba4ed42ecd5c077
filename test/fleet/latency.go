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
}

// Observe records obj's delay since it was written. Initial-list adds and objects without a
// stamp are ignored.
func (l *WriteLatency) Observe(obj any, initial bool) {
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
	l.mu.Unlock()
}

// Reset forgets what was recorded.
func (l *WriteLatency) Reset() {
	l.mu.Lock()
	l.d = nil
	l.mu.Unlock()
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
