package auth

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// answers caches access reviews' answers, per user and question, in place of the webhook
// authorizer's own cache, for two reasons that matter at a thousand clusters:
//   - its size is set by Options.CacheEntries: one caller's fleet question is one answer per
//     cluster, and the webhook authorizer keeps 8,192 answers in all, fewer than ten callers'
//     fleets of 1,000;
//   - the answers a fleet question reviewed are kept for their TTL from when the question was
//     answered in full (restamp), not from when each review came back: otherwise a fleet that
//     takes longer to review than DenyTTL has lost its first denials before its last one is
//     in, and the caller's next read reviews them again.
//
// Invariants: an answer is used at most its TTL after its review, plus, when a fleet question
// reviewed it, that question's duration, capped at AllowTTL. Only the question that reviewed
// an answer extends it (an answer read from the cache is never extended), and an answer never
// replaces one from a later review.
type answers struct {
	allowTTL, denyTTL time.Duration
	now               func() time.Time
	lru               *lru.Cache[string, answer]
	// mu makes put's and restamp's compare-and-add atomic; get reads without it.
	mu sync.Mutex
}

type answer struct {
	allowed  bool
	reviewed time.Time // when the review came back
	until    time.Time
}

func newAnswers(entries int, allowTTL, denyTTL time.Duration) (*answers, error) {
	c, err := lru.New[string, answer](entries)
	if err != nil {
		return nil, err
	}
	return &answers{allowTTL: allowTTL, denyTTL: denyTTL, now: time.Now, lru: c}, nil
}

func (a *answers) ttl(allowed bool) time.Duration {
	if allowed {
		return a.allowTTL
	}
	return a.denyTTL
}

// get is the answer to key and when it was reviewed, if one is cached and current.
func (a *answers) get(key string) (allowed bool, reviewed time.Time, ok bool) {
	e, ok := a.lru.Get(key)
	if !ok || !a.now().Before(e.until) {
		return false, time.Time{}, false
	}
	return e.allowed, e.reviewed, true
}

// put caches allowed, reviewed at, as key's answer, unless a later review's answer is there.
func (a *answers) put(key string, allowed bool, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.lru.Peek(key); ok && e.reviewed.After(at) {
		return
	}
	a.lru.Add(key, answer{allowed: allowed, reviewed: at, until: at.Add(a.ttl(allowed))})
}

// restamp keeps key's answer, reviewed at by a fleet question answered in full at done, for
// its TTL from done (at most AllowTTL more than from its review): only if the answer cached is
// still that review's.
func (a *answers) restamp(key string, at, done time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.lru.Peek(key)
	if !ok || !e.reviewed.Equal(at) {
		return
	}
	ttl := a.ttl(e.allowed)
	until := done.Add(ttl)
	if limit := at.Add(ttl + a.allowTTL); until.After(limit) {
		until = limit
	}
	if until.After(e.until) {
		e.until = until
		a.lru.Add(key, e)
	}
}
