// Package informer owns one client-go informer stack (Reflector → FIFO → Indexer, built by
// cache.NewInformerWithOptions) whose handlers are called on the informer's own processing
// goroutine, in the order of its events, with no per-handler queue between them. It is a
// cache.SharedIndexInformer, so that it joins an Aggregate as any client-go informer does.
//
// client-go's SharedIndexInformer gives every handler a processorListener: two goroutines and
// a buffer per handler, through which every event passes. An Aggregate's member has one
// handler, its feed, which only records the event and queues it for the fleet's handlers, each
// of which has its own queue and goroutine already. The listener in between is a second queue
// that costs a goroutine hand-off per event and holds no state anyone reads. This informer
// removes it. Its handlers must return quickly: while one runs, the informer processes nothing.
//
// Files: informer.go (Informer and its registrations).
package informer
