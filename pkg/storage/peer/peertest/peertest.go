package peertest

import (
	"fmt"
	"net/http"

	"github.com/multicache/multicache/pkg/storage/peer"
)

// PreviousRelease serves h as a replica of the previous release's envelope
// (peer.OldestProtocolVersion) does: a call of any other version is refused with 503,
// Retry-After and that version's header, as that release refused it; a call of that version is
// h's to answer (peer.Handler answers it in that version), without the header that names a
// newer version (that release did not send it).
func PreviousRelease(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(peer.ProtocolHeader); v != peer.OldestProtocolVersion {
			w.Header().Set(peer.ProtocolHeader, peer.OldestProtocolVersion)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"message":"this replica speaks peer protocol %q, the caller %q"}`, peer.OldestProtocolVersion, v)
			return
		}
		h.ServeHTTP(previousWriter{w}, r)
	})
}

// previousWriter writes an answer as the previous release did: without NewestProtocolHeader,
// which it did not know.
type previousWriter struct{ http.ResponseWriter }

func (w previousWriter) WriteHeader(code int) {
	w.Header().Del(peer.NewestProtocolHeader)
	w.ResponseWriter.WriteHeader(code)
}

func (w previousWriter) Write(b []byte) (int, error) {
	w.Header().Del(peer.NewestProtocolHeader)
	return w.ResponseWriter.Write(b)
}

// Flush flushes, as the watches' answers need.
func (w previousWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
