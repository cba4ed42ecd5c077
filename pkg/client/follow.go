package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

// FollowHandler receives what Follow learns. Calls are sequential. Like a reflector's store,
// it must take events idempotently: a watch from a list's position can repeat a change the list
// already showed, and a stream resumed from its last bookmark repeats what came after it.
type FollowHandler interface {
	// Replace gives a complete list: the first, and each one after a 410. What the handler
	// held before is replaced by it.
	Replace(list *api.List)
	// Event gives one ADDED, MODIFIED or DELETED event after the last list.
	Event(ev api.WatchEvent)
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// Retry is the pause after a failed list or watch. Default 200 ms.
	Retry time.Duration
	// OnError, if set, hears every error Follow recovers from (410s included).
	OnError func(error)
}

// Follow keeps h in step with resource until ctx ends: it lists (every page), watches from
// the list's resourceVersion, resumes a stream that ends from its last bookmark (after a pause
// when the stream delivered nothing), and lists again when the daemon answers 410 Expired.
// Bookmarks are not passed on.
func (c *Client) Follow(ctx context.Context, resource string, q Query, h FollowHandler, opts FollowOptions) {
	if opts.Retry == 0 {
		opts.Retry = 200 * time.Millisecond
	}
	report := func(err error) {
		if opts.OnError != nil && ctx.Err() == nil {
			opts.OnError(err)
		}
	}
	pause := func(err error) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(max(opts.Retry, RetryAfter(err))):
			return true
		}
	}
	for ctx.Err() == nil {
		// A list is whole or refused: while a cluster it spans is not complete where it is
		// answered (a move under way: 429) or its owner is down (503), the daemon answers with
		// Retry-After, and the handler keeps what it holds until the list is whole.
		list, err := c.ListAll(ctx, resource, q)
		if err != nil {
			report(err)
			if !pause(err) {
				return
			}
			continue
		}
		h.Replace(list)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			next, delivered, err := c.followStream(ctx, resource, q, rv, h)
			if IsExpired(err) {
				report(err)
				break // list again
			}
			if err != nil && !errors.Is(err, io.EOF) {
				report(err)
			}
			if (err != nil && !errors.Is(err, io.EOF)) || delivered == 0 {
				// Failed, or ended without a single event: do not spin on a stream that keeps ending.
				if !pause(err) {
					return
				}
			}
			rv = next
		}
	}
}

// followStream relays one watch stream from rv and returns where the next one resumes and how
// many events (bookmarks included) it delivered.
func (c *Client) followStream(ctx context.Context, resource string, q Query, rv string, h FollowHandler) (string, int, error) {
	w, err := c.Watch(ctx, resource, q, rv)
	if err != nil {
		return rv, 0, err
	}
	defer w.Close()
	n := 0
	for {
		ev, err := w.Next()
		if err != nil {
			return w.ResourceVersion(), n, err
		}
		n++
		if ev.Type != api.Bookmark {
			h.Event(ev)
		}
	}
}
