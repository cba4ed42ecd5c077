package storage

import (
	"context"
	"sync"
)

// A read scope is one request's. The reads made under it share what each would otherwise read
// again: this replica's status of its clusters is read once, however many times the request
// reads this replica's part (a page, its count, the second round of a key-ordered page), and
// every read of the request sees the same clusters in the same states.
//
// It lives as long as the context it is in. A read that outlives its start (a watch, a
// summary's stream) is never put under one: what it would share would be held, and stale, for
// as long as it runs.
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
