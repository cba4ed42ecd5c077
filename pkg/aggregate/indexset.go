package aggregate

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
)

// liveIndex is an index that questions asked again start (a count index, a sort index): its
// handler is removed with it, and its memory is estimated as it goes.
type liveIndex interface {
	comparable
	remove()
	isRemoved() bool
	bytes() int64
}

// indexSet keeps the indexes one kind of question learns: each key's asks, and its index once
// started, evicted least recently asked beyond max indexes or maxBytes of them. An evicted
// index is removed with its handler.
type indexSet[I liveIndex] struct {
	mu       sync.Mutex // taken before any index's own lock, never after
	asked    *lru.Cache[string, *askedKey[I]]
	max      int // 0: learns none
	maxBytes int64
	// keepNewest: the byte bound never evicts the most recently asked index, one learned
	// under an estimate that came out larger (built, answering once, built again otherwise).
	keepNewest bool
}

// askedKey is one key's record: how often it was asked, and its index once started.
type askedKey[I liveIndex] struct {
	asks int
	idx  I
}

func newIndexSet[I liveIndex](maxIndexes int, maxBytes int64, keepNewest bool) *indexSet[I] {
	s := &indexSet[I]{max: maxIndexes, maxBytes: maxBytes, keepNewest: keepNewest}
	// Keys asked once are remembered too (to learn them at their next ask), in twice the
	// room.
	s.asked, _ = lru.NewWithEvict(max(2*maxIndexes, 1), func(_ string, v *askedKey[I]) {
		var none I
		if v.idx != none {
			v.idx.remove()
		}
	})
	return s
}

// askLocked records an ask of key and returns its record; an index lost meanwhile (an
// overflow) is forgotten, to be learned again from this ask on. s.mu is held.
func (s *indexSet[I]) askLocked(key string) *askedKey[I] {
	e, ok := s.asked.Get(key)
	if !ok {
		e = &askedKey[I]{}
		s.asked.Add(key, e)
	}
	e.asks++
	var none I
	if e.idx != none && e.idx.isRemoved() {
		e.idx = none
	}
	return e
}

// startsLocked reports whether e's index is to start now: it has none, and this is the ask
// that starts one.
func (s *indexSet[I]) startsLocked(e *askedKey[I]) bool {
	var none I
	return e.idx == none && e.asks >= learnAfterAsks
}

// makeRoomLocked evicts the least recently asked indexes (other than keep's) until one more,
// of need bytes, fits under max and maxBytes.
func (s *indexSet[I]) makeRoomLocked(keep *askedKey[I], need int64) {
	var none I
	for {
		var oldest string
		n, total := 0, need
		for _, k := range s.asked.Keys() { // oldest first
			if e, ok := s.asked.Peek(k); ok && e.idx != none && e != keep {
				if n == 0 {
					oldest = k
				}
				n++
				total += e.idx.bytes()
			}
		}
		if n == 0 || (n < s.max && total <= s.maxBytes) {
			return
		}
		s.asked.Remove(oldest)
	}
}

// bound evicts the least recently asked indexes while their memory passes maxBytes (with
// keepNewest, never the last one).
func (s *indexSet[I]) bound() {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := 0
	if s.keepNewest {
		keep = 1
	}
	for {
		idxs := s.indexesLocked()
		var total int64
		for _, idx := range idxs {
			total += idx.bytes()
		}
		if total <= s.maxBytes || len(idxs) <= keep {
			return
		}
		for _, k := range s.asked.Keys() { // the oldest with an index
			if e, ok := s.asked.Peek(k); ok && e.idx == idxs[0] {
				s.asked.Remove(k)
				break
			}
		}
	}
}

// closeLocked removes every index, with its handler, and learns none from then on.
func (s *indexSet[I]) closeLocked() {
	s.max = 0
	s.asked.Purge() // its eviction removes each index
}

// indexesLocked lists the started indexes, least recently asked first. s.mu is held.
func (s *indexSet[I]) indexesLocked() []I {
	var none I
	var out []I
	for _, e := range s.asked.Values() {
		if e.idx != none {
			out = append(out, e.idx)
		}
	}
	return out
}
