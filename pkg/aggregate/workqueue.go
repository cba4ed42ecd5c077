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
	return HandlerFuncs{
		AddFunc:    func(cluster string, obj any, _ bool) { add(cluster, obj) },
		UpdateFunc: func(cluster string, _, obj any) { add(cluster, obj) },
		DeleteFunc: add,
	}
}
