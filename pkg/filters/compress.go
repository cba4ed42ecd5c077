package filters

import (
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
)

// gzipThreshold is the smallest body compressed: the threshold kube-apiserver uses
// (k8s.io/apiserver responsewriters, 128 KiB), below which compression costs more than it saves.
const gzipThreshold = 128 << 10

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: never an error
	return w
}}

// CompressLarge gzips a response whose first Write holds at least gzipThreshold bytes, when
// the request accepts gzip, as kube-apiserver does. A get writes its whole body in one Write
// and a list its first chunk, so the choice follows the answer's size. Streams (watches) are
// never compressed (kube-apiserver does not compress them either): their events go out as
// written. stream says which requests stream; it must tell them as the handlers do, so that
// none is compressed by mistake.
func CompressLarge(h http.Handler, stream func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stream(r) || !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		cw := &compressWriter{ResponseWriter: w}
		defer cw.close()
		h.ServeHTTP(cw, r)
	})
}

// acceptsGzip reports whether an Accept-Encoding value lists gzip with a non-zero weight.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// compressWriter decides at the first Write whether the body is gzipped.
type compressWriter struct {
	http.ResponseWriter
	decided bool
	gz      *gzip.Writer // set once the body is gzipped
	status  int          // a WriteHeader held until the first Write decides the headers
}

func (c *compressWriter) WriteHeader(code int) {
	switch {
	case c.decided:
		c.ResponseWriter.WriteHeader(code) // superfluous: http logs and ignores it
	case c.status == 0:
		c.status = code
	} // a second code before any write is ignored, as http does: the first one holds
}

func (c *compressWriter) Write(p []byte) (int, error) {
	if !c.decided {
		c.decided = true
		h := c.Header()
		if len(p) >= gzipThreshold && h.Get("Content-Encoding") == "" && (c.status == 0 || c.status == http.StatusOK) {
			h.Set("Content-Encoding", "gzip")
			h.Del("Content-Length")
			h.Add("Vary", "Accept-Encoding")
			c.gz = gzipWriters.Get().(*gzip.Writer)
			c.gz.Reset(c.ResponseWriter)
		}
		if c.status != 0 {
			c.ResponseWriter.WriteHeader(c.status)
		}
	}
	if c.gz != nil {
		return c.gz.Write(p)
	}
	return c.ResponseWriter.Write(p)
}

// Flush sends what is written so far; for a gzipped body, what the compressor holds too.
func (c *compressWriter) Flush() {
	if !c.decided { // the headers leave now: the body stays uncompressed
		c.decided = true
		if c.status != 0 {
			c.ResponseWriter.WriteHeader(c.status)
		}
	}
	if c.gz != nil {
		_ = c.gz.Flush()
	}
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (c *compressWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// close ends a gzipped body, and writes a held status when nothing was written.
func (c *compressWriter) close() {
	if !c.decided && c.status != 0 {
		c.ResponseWriter.WriteHeader(c.status)
	}
	if c.gz != nil {
		_ = c.gz.Close()
		c.gz.Reset(nil)
		gzipWriters.Put(c.gz)
		c.gz = nil
	}
}
