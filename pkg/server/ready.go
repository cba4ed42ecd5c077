package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage/local"
)

// ready applies the readiness policy: every cluster × resource is Synced or NotServed, except
// dead ones, which have been failing (Failed or Degraded) for DeadClusterTimeout without a
// break. A slow one, syncing without an error, always counts. It returns the others.
func (s *Server) ready() (bool, []string) {
	if !s.reg.Loaded() {
		return false, []string{"the cluster source: not loaded yet"}
	}
	if f, ok := s.opts.Fleet.(interface{ Ready() error }); ok {
		if err := f.Ready(); err != nil {
			return false, []string{err.Error()}
		}
	}
	deadAfter := s.opts.DeadClusterTimeout
	if deadAfter == 0 {
		deadAfter = 2 * time.Minute
	}
	var waiting []string
	now := time.Now()
	for _, cs := range s.reg.Status() {
		for _, rs := range cs.Resources {
			switch rs.State {
			case clusterset.Synced, clusterset.NotServed:
				continue
			case clusterset.Failed, clusterset.Degraded:
				if now.Sub(rs.Since) >= deadAfter {
					continue // dead: it no longer holds the fleet back
				}
			}
			w := cs.Name + "/" + rs.Resource + ": " + string(rs.State)
			if rs.Error != "" {
				w += " (" + rs.Error + ")"
			}
			waiting = append(waiting, w)
		}
	}
	return len(waiting) == 0, waiting
}

// handleReady answers "ok" or "not ready" with a count; ?verbose (behind auth) names what is
// waiting.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ok, waiting := s.ready()
	if ok {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if r.URL.Query().Has("verbose") {
		// It names clusters: only those the caller may read.
		ok, err := local.Readable(r.Context(), auth.AccessOf(r.Context()), s.reg.Clusters())
		if err != nil {
			filters.WriteAPIError(w, err)
			return
		}
		readable := sets.New(ok...)
		shown := slices.DeleteFunc(slices.Clone(waiting), func(l string) bool {
			c, _, _ := strings.Cut(l, "/")
			return !readable.Has(c)
		})
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready; waiting for:\n%s\n", strings.Join(shown, "\n"))
		if n := len(waiting) - len(shown); n > 0 {
			_, _ = fmt.Fprintf(w, "and %d cluster resources you may not read\n", n)
		}
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, "not ready: %d cluster resources are not synced\n", len(waiting))
}
