package server

import (
	"context"
	"testing"
)

// runRegistry starts reg until the test ends.
func runRegistry(t *testing.T, start func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}
