package aggregate

// KeyAdder is what QueueKeys needs of a queue: client-go's workqueue.TypedInterface[Key] and
// its rate-limiting and delaying variants all have it.
type KeyAdder interface {
	Add(item Key)
}

// QueueKeys returns a Handler that adds the Key of every object that changes to q, as
// client-go controllers do with cache.MetaNamespaceKeyFunc: the worker that takes the Key
// reads the object's current state with Aggregate.Get (absent: it was deleted). A Key is a
// comparable value, so a queue merges repeated changes of one object until a worker takes it.
func QueueKeys(q KeyAdder) Handler {
	add := func(cluster string, obj any) {
		if k, err := KeyOf(cluster, obj); err == nil {
			q.Add(k)
		}
	}
	return keyHandler{HandlerFuncs{
		AddFunc:    func(cluster string, obj any, _ bool) { add(cluster, obj) },
		UpdateFunc: func(cluster string, _, obj any) { add(cluster, obj) },
		DeleteFunc: add,
	}}
}

// keyReader marks a handler whose worker reads objects by key from the store, which runs ahead
// of the handlers: an object added and deleted before it caught up is told as a delete, not
// merged away, since the worker may have read it meanwhile.
type keyReader interface{ readsByKey() }

type keyHandler struct{ HandlerFuncs }

func (keyHandler) readsByKey() {}
