package shard

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"
)

// A peer Lease is a claim anyone who may write Leases in the sharding namespace can make: its
// URL and weight are what its writer says. With Options.Verify set, a peer counts (is a member,
// holds its fences, is handed clusters, is asked for answers and handovers) only once its
// advertised URL has answered with a certificate that proves the claim, and only while the URL
// stays the one proved. A forged Lease thus moves no cluster and receives no request.

// verifyRetry bounds the pause between two attempts to prove one peer that failed: attempts
// start at a second apart and double up to it.
const verifyRetry = 30 * time.Second

// verification is what this replica knows of one peer's proof.
type verification struct {
	url     string
	ok      bool
	at      time.Time // when it was proved (ok)
	retry   time.Time // not before this, the next attempt (not ok)
	backoff time.Duration
	running bool
	err     string // the last failure, as logged
}

// verifier runs Options.Verify for each peer, at most one attempt per peer at a time, off the
// reconcile loop: a peer whose URL hangs delays its own proof only.
type verifier struct {
	verify func(ctx context.Context, id, url string) error
	log    *zap.Logger
	poke   func()
	ttl    time.Duration
	clock  clock.PassiveClock

	mu   sync.Mutex
	byID map[string]*verification
}

func newVerifier(verify func(ctx context.Context, id, url string) error, log *zap.Logger, poke func(), ttl time.Duration, clk clock.PassiveClock) *verifier {
	return &verifier{verify: verify, log: log, poke: poke, ttl: ttl, clock: clk, byID: map[string]*verification{}}
}

// apply marks the peers of a snapshot that are not proved (for their current URL) as not live,
// starts the attempts that are due, and forgets peers that have no Lease any more. A proved
// peer's live run starts no earlier than its proof, so that it is handed clusters only once
// it has been live and proved for a LeaseDuration. soon learns when an attempt is due.
func (v *verifier) apply(ctx context.Context, peers map[string]peerView, now time.Time, soon func(time.Time)) {
	if v == nil || v.verify == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for id := range v.byID {
		if _, ok := peers[id]; !ok {
			delete(v.byID, id)
		}
	}
	for id, p := range peers {
		st := v.byID[id]
		if st == nil || st.url != p.URL {
			st = &verification{url: p.URL, backoff: time.Second}
			v.byID[id] = st
		}
		if st.ok {
			if p.Live && p.Since.Before(st.at) {
				p.Since = st.at
				peers[id] = p
			}
			continue
		}
		renewing := p.Live
		p.Unproved, p.renewing = true, renewing
		p.Live, p.Since = false, time.Time{}
		peers[id] = p
		if renewing && !st.running && !now.Before(st.retry) && p.URL != "" {
			st.running = true
			go v.attempt(ctx, id, p.URL, st)
		} else if !st.running {
			soon(st.retry)
		}
	}
}

// attempt runs one proof of id at url and records it.
func (v *verifier) attempt(ctx context.Context, id, url string, st *verification) {
	ctx, cancel := context.WithTimeout(ctx, min(v.ttl, 10*time.Second))
	err := v.verify(ctx, id, url)
	cancel()
	v.mu.Lock()
	now := v.clock.Now()
	st.running = false
	switch {
	case v.byID[id] != st:
		// The peer's URL changed, or its Lease went, meanwhile: this proof is of nothing.
	case err == nil:
		st.ok, st.at, st.err = true, now, ""
		v.log.Info("peer proved its identity: its Lease counts", zap.String("peer", id), zap.String("url", url))
	default:
		st.retry = now.Add(st.backoff)
		st.backoff = min(2*st.backoff, verifyRetry)
		if msg := err.Error(); msg != st.err {
			st.err = msg
			v.log.Warn("peer Lease does not count: its URL did not prove the peer's identity", zap.String("peer", id), zap.String("url", url), zap.Error(err))
		}
	}
	v.mu.Unlock()
	v.poke()
}
