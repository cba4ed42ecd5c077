package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

// FollowHandler receives what Follow learns. Calls are sequential.
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
// the list's resourceVersion, resumes a stream that ends from its last bookmark, and lists
// again when the daemon answers 410 Expired. Bookmarks are not passed on.
func (c *Client) Follow(ctx context.Context, resource string, q Query, h FollowHandler, opts FollowOptions) {
	if opts.Retry == 0 {
		opts.Retry = 200 * time.Millisecond
	}
	report := func(err error) {
		if opts.OnError != nil && ctx.Err() == nil {
			opts.OnError(err)
		}
	}
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(opts.Retry):
			return true
		}
	}
	for ctx.Err() == nil {
		list, err := c.ListAll(ctx, resource, q)
		if err != nil {
			report(err)
			if !pause() {
				return
			}
			continue
		}
		h.Replace(list)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			next, err := c.followStream(ctx, resource, q, rv, h)
			if IsExpired(err) {
				report(err)
				break // list again
			}
			if err != nil && !errors.Is(err, io.EOF) {
				report(err)
				if !pause() {
					return
				}
			}
			rv = next
		}
	}
}

// followStream relays one watch stream from rv and returns where the next one resumes.
func (c *Client) followStream(ctx context.Context, resource string, q Query, rv string, h FollowHandler) (string, error) {
	w, err := c.Watch(ctx, resource, q, rv)
	if err != nil {
		return rv, err
	}
	defer w.Close()
	for {
		ev, err := w.Next()
		if err != nil {
			return w.ResourceVersion(), err
		}
		if ev.Type != api.Bookmark {
			h.Event(ev)
		}
	}
}
