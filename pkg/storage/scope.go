package storage

import (
	"context"
	"sync"
)

// A read scope is one request's. The reads made under it share what each would otherwise read
// again: this replica's status of its clusters is read once, however many times the request
// reads this replica's part (a page, its count, the second round of a key-ordered page), and
// those reads see the same clusters in the same states.
//
// What a scope shares is as old as the request: a read that takes a new position of the watch
// cache long after the scope's first read (a fan-out that starts over once its first round
// failed) takes a new scope (NewReadScope), so that the status it judges clusters by is never
// much older than its position. A read that outlives its start (a watch, a summary's stream) is
// never put under one: what it would share would be held, and stale, for as long as it runs.
type readScope struct {
	mu   sync.Mutex
	vals map[any]any
}

type scopeKey struct{}

// WithReadScope returns ctx under a read scope of its own, or ctx when it is under one.
func WithReadScope(ctx context.Context) context.Context {
	if _, ok := ctx.Value(scopeKey{}).(*readScope); ok {
		return ctx
	}
	return context.WithValue(ctx, scopeKey{}, &readScope{})
}

// NewReadScope returns ctx under a new read scope, whatever scope ctx is under.
func NewReadScope(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, &readScope{})
}

// Scoped is key's value in ctx's read scope: what read returned the first time it was asked
// under that scope, which callers share and must not modify. Without a scope it is read's
// value, each time. Callers that ask at once wait for the first one's read: read is called at
// most once per scope and key.
func Scoped[T any](ctx context.Context, key any, read func() T) T {
	sc, ok := ctx.Value(scopeKey{}).(*readScope)
	if !ok {
		return read()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if v, ok := sc.vals[key]; ok {
		return v.(T)
	}
	v := read()
	if sc.vals == nil {
		sc.vals = map[any]any{}
	}
	sc.vals[key] = v
	return v
}
