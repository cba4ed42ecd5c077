package filters

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Limits caps concurrent watches and other requests, as kube-apiserver's max-in-flight filter
// does: a request past its cap gets 429 Too Many Requests with Retry-After, which client-go
// honours.
type Limits struct {
	watches, requests chan struct{}
}

// NewLimits allows at most watches open watches and requests other requests at once.
func NewLimits(watches, requests int) *Limits {
	return &Limits{watches: make(chan struct{}, watches), requests: make(chan struct{}, requests)}
}

// AcquireWatch takes a watch slot: ok false when none is free, the 429 answered.
func (l *Limits) AcquireWatch(w http.ResponseWriter) (release func(), ok bool) {
	return acquire(w, l.watches, "too many open watches (server.maxWatches is %d); retry later")
}

// AcquireRequest takes a request slot: ok false when none is free, the 429 answered.
func (l *Limits) AcquireRequest(w http.ResponseWriter) (release func(), ok bool) {
	return acquire(w, l.requests, "too many requests in flight (server.maxRequestsInFlight is %d); retry later")
}

// Watch runs f in a watch slot; when none is free it answers 429 instead.
func (l *Limits) Watch(w http.ResponseWriter, f func()) {
	if release, ok := l.AcquireWatch(w); ok {
		defer release()
		f()
	}
}

// Request runs f in a request slot; when none is free it answers 429 instead.
func (l *Limits) Request(w http.ResponseWriter, f func()) {
	if release, ok := l.AcquireRequest(w); ok {
		defer release()
		f()
	}
}

// Limited runs h in a request slot.
func (l *Limits) Limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { l.Request(w, func() { h(w, r) }) }
}

func acquire(w http.ResponseWriter, sem chan struct{}, msg string) (func(), bool) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, true
	default:
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusTooManyRequests, fmt.Sprintf(msg, cap(sem)))
		return nil, false
	}
}

// WithTimeout bounds h's request context by d (not for watches: they have none).
func WithTimeout(h http.HandlerFunc, d time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}
