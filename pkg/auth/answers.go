package auth

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// answers caches access reviews' answers, per user and question, in place of the webhook
// authorizer's own cache, for two reasons that matter at a thousand clusters:
//   - its size is set by Options.CacheEntries: one caller's fleet question is one answer per
//     cluster, and the webhook authorizer keeps 8,192 answers in all, fewer than ten callers'
//     fleets of 1,000;
//   - a fleet question's answers are kept for their TTL from when the question was answered in
//     full (restamp), not from when each review came back: otherwise a fleet that takes longer
//     to review than DenyTTL has lost its first denials before its last one is in, and the
//     caller's next read reviews them again.
//
// Invariant: an answer is used at most its TTL after the question that needed it was
// answered; a question is answered within Options.Timeout per review, so an answer is at most
// TTL plus the question's duration old.
type answers struct {
	allowTTL, denyTTL time.Duration
	now               func() time.Time
	lru               *lru.Cache[string, answer]
}

type answer struct {
	allowed bool
	until   time.Time
}

func newAnswers(entries int, allowTTL, denyTTL time.Duration) (*answers, error) {
	c, err := lru.New[string, answer](entries)
	if err != nil {
		return nil, err
	}
	return &answers{allowTTL: allowTTL, denyTTL: denyTTL, now: time.Now, lru: c}, nil
}

// get is the answer to key, if one is cached and current.
func (a *answers) get(key string) (allowed, ok bool) {
	e, ok := a.lru.Get(key)
	if !ok || !a.now().Before(e.until) {
		return false, false
	}
	return e.allowed, true
}

// put caches allowed as key's answer, from at.
func (a *answers) put(key string, allowed bool, at time.Time) {
	ttl := a.denyTTL
	if allowed {
		ttl = a.allowTTL
	}
	a.lru.Add(key, answer{allowed: allowed, until: at.Add(ttl)})
}
