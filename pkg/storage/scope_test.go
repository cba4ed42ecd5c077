package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// TestScoped: under a read scope a key is read once, by one of the callers that ask at once,
// and every caller gets that read's value; another key, or another scope, reads its own;
// without a scope every call reads.
func TestScoped(t *testing.T) {
	var reads atomic.Int32
	read := func() int { return int(reads.Add(1)) }
	type key struct{ n int }

	ctx := WithReadScope(context.Background())
	if WithReadScope(ctx) != ctx {
		t.Error("WithReadScope under a scope made another")
	}
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = Scoped(ctx, key{1}, read)
		}()
	}
	wg.Wait()
	for i, v := range got {
		if v != 1 {
			t.Errorf("caller %d got %d, want the one read's 1", i, v)
		}
	}
	if v := Scoped(ctx, key{2}, read); v != 2 {
		t.Errorf("another key got %d, want its own read (2)", v)
	}
	if v := Scoped(WithReadScope(context.Background()), key{1}, read); v != 3 {
		t.Errorf("another scope got %d, want its own read (3)", v)
	}
	if a, b := Scoped(context.Background(), key{1}, read), Scoped(context.Background(), key{1}, read); a != 4 || b != 5 {
		t.Errorf("without a scope got %d and %d, want a read each (4, 5)", a, b)
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if v := Scoped(child, key{1}, read); v != 1 {
		t.Errorf("a context derived from the scope's got %d, want the scope's 1", v)
	}
}
