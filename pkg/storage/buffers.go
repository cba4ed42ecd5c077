package storage

import (
	"bytes"
	"encoding/json"
	"runtime"
	"sync"
)

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// GetBuffer is an empty buffer from a pool shared by the writers of answers.
func GetBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

// PutBuffer recycles buf unless it grew past what a typical page needs.
func PutBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		buf.Reset()
		buffers.Put(buf)
	}
}

// parallelItems: chunks with at least this many items are encoded by several goroutines.
const parallelItems = 16

// EncodeEach appends the n entries one writes, comma-separated. Many entries are split into
// contiguous chunks encoded concurrently (JSON encoding is most of a page's cost), then joined
// in order.
func EncodeEach(buf *bytes.Buffer, n int, one func(buf *bytes.Buffer, i int) error) error {
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
		chunks[w] = GetBuffer()
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
			PutBuffer(c)
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

// AppendJSON appends v's JSON to buf: the bytes json.Marshal gives (HTML escaped too), encoded
// in buf rather than in a copy of their own. On an error buf is as it was.
func AppendJSON(buf *bytes.Buffer, v any) error {
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		return err // Encode writes nothing unless v encodes whole
	}
	buf.Truncate(buf.Len() - 1) // the newline Encode ends with
	return nil
}
