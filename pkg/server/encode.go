package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
)

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

// putBuffer recycles buf unless it grew past what a typical page needs.
func putBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		buf.Reset()
		buffers.Put(buf)
	}
}

// writeJSON writes v, an api type, as the answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeList writes an api.List whose items are encoded from page by encodeItems: the same bytes
// json.Marshal of the api.List would give (TestListBytesMatchAPI), without a copy of every
// object into an intermediate value.
func (s *Server) writeList(w http.ResponseWriter, page []item, info map[string]clusterset.ResourceStatus, list api.List) error {
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteString(`{"items":[`)
	if err := s.encodeItems(buf, page, info); err != nil {
		return err
	}
	if err := endList(buf, list); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
	return nil
}

// writeRawList writes list, whose items' objects are encoded already (a merged answer's), as
// writeList does: each object's bytes as they are, never encoded again.
func writeRawList(w http.ResponseWriter, list api.List) error {
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteString(`{"items":[`)
	for i, it := range list.Items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"cluster":`)
		writeString(buf, it.Cluster)
		buf.WriteString(`,"object":`)
		buf.Write(it.Object)
		buf.WriteByte('}')
	}
	if err := endList(buf, list); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(buf.Bytes())
	return err
}

// endList closes the items of a list in buf and appends the rest of list, as encoding/json
// orders an api.List's fields.
func endList(buf *bytes.Buffer, list api.List) error {
	buf.WriteString(`]`)
	if list.Continue != "" {
		buf.WriteString(`,"continue":`)
		writeString(buf, list.Continue)
	}
	buf.WriteString(`,"resourceVersion":`)
	writeString(buf, list.ResourceVersion)
	buf.WriteString(`,"clusters":`)
	if list.Clusters == nil {
		list.Clusters = []api.ClusterFreshness{}
	}
	cb, err := json.Marshal(list.Clusters)
	if err != nil {
		return err
	}
	buf.Write(cb)
	buf.WriteString("}\n")
	return nil
}

// writeString appends s as a JSON string, as encoding/json writes it.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}

// writeName appends a cluster name, or an event type, as a JSON string: neither has a
// character JSON escapes (aggregate.ValidateClusterName), so no encoder is needed.
func writeName(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	buf.WriteString(s)
	buf.WriteByte('"')
}

// writeItem writes an api.Item for obj, as writeList writes each item.
func (s *Server) writeItem(w http.ResponseWriter, cluster string, obj any, rs clusterset.ResourceStatus) error {
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteString(`{"cluster":`)
	writeName(buf, cluster)
	buf.WriteString(`,"object":`)
	if err := s.appendEncoded(buf, obj, rs); err != nil {
		return err
	}
	buf.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
	return nil
}

// parallelItems: pages with at least this many items are encoded by several goroutines.
const parallelItems = 16

// encodeItems appends page as comma-separated api.Item entries.
func (s *Server) encodeItems(buf *bytes.Buffer, page []item, info map[string]clusterset.ResourceStatus) error {
	return encodeEach(buf, len(page), func(buf *bytes.Buffer, i int) error {
		it := page[i]
		buf.WriteString(`{"cluster":`)
		writeName(buf, it.Key.Cluster)
		buf.WriteString(`,"object":`)
		if err := s.appendEncoded(buf, it.Object, info[it.Key.Cluster]); err != nil {
			return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
		}
		buf.WriteByte('}')
		return nil
	})
}

// encodeEach appends the n entries one writes, comma-separated. Many entries are split into
// contiguous chunks encoded concurrently (JSON encoding is most of a page's cost), then joined
// in order.
func encodeEach(buf *bytes.Buffer, n int, one func(buf *bytes.Buffer, i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), 4, n/parallelItems*2)
	if workers < 2 {
		for i := range n {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := one(buf, i); err != nil {
				return err
			}
		}
		return nil
	}
	chunks := make([]*bytes.Buffer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for w := range workers {
		chunks[w] = getBuffer()
		wg.Go(func() {
			for i := w * per; i < min(n, (w+1)*per); i++ {
				if i > w*per {
					chunks[w].WriteByte(',')
				}
				if errs[w] = one(chunks[w], i); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range chunks {
			putBuffer(c)
		}
	}()
	for w, c := range chunks {
		if errs[w] != nil {
			return errs[w]
		}
		if c.Len() == 0 {
			continue
		}
		if w > 0 {
			buf.WriteByte(',')
		}
		buf.Write(c.Bytes())
	}
	return nil
}

// appendEncoded appends obj as JSON to buf, with apiVersion and kind (typed objects from lists
// carry neither), and without Secret data unless allowed (redactSecret). It never modifies
// obj: it is the cache's.
func (s *Server) appendEncoded(buf *bytes.Buffer, obj any, rs clusterset.ResourceStatus) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if !s.opts.AllowSecretData {
		obj = redactSecret(obj, rs.Kind == "Secret" && rs.Group == "")
	}
	scratch := getBuffer()
	defer putBuffer(scratch)
	if err := json.NewEncoder(scratch).Encode(obj); err != nil {
		return err
	}
	b := bytes.TrimSuffix(scratch.Bytes(), []byte("\n"))
	if rs.Kind != "" && bytes.HasPrefix(b, []byte(`{"metadata"`)) {
		apiVersion := rs.Version
		if rs.Group != "" {
			apiVersion = rs.Group + "/" + rs.Version
		}
		buf.WriteString(`{"kind":`)
		buf.WriteString(strconv.Quote(rs.Kind))
		buf.WriteString(`,"apiVersion":`)
		buf.WriteString(strconv.Quote(apiVersion))
		buf.WriteByte(',')
		b = b[1:]
	}
	buf.Write(b)
	return nil
}
