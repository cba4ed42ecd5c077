package filters

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"": false, "gzip": true, "GZIP": true, "deflate, gzip;q=0.5": true, "br": false,
		"gzip;q=0": false, "gzip; q=0.0": false, "identity": false, "x-gzip": false,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %t, want %t", header, got, want)
		}
	}
}

// TestCompressLarge: a body of at least gzipThreshold bytes in its first Write is gzipped for a
// client that accepts gzip, and arrives intact; smaller bodies, other clients, errors and
// streams flushed before their first write stay as they are.
func TestCompressLarge(t *testing.T) {
	big := bytes.Repeat([]byte(`{"kind":"Pod","metadata":{"name":"x"}},`), gzipThreshold/30)
	small := []byte(`{"kind":"PodList","items":[]}`)
	cases := []struct {
		name, accept, path string
		status             int
		flushFirst         bool
		body               []byte
		gzipped            bool
	}{
		{"large", "gzip", "/api/v1/pods", 0, false, big, true},
		{"large, explicit 200", "gzip", "/api/v1/pods", 200, false, big, true},
		{"small", "gzip", "/api/v1/pods", 0, false, small, false},
		{"client without gzip", "", "/api/v1/pods", 0, false, big, false},
		{"large error", "gzip", "/api/v1/pods", 500, false, big, false},
		{"stream flushed first", "gzip", "/api/v1/pods", 0, true, big, false},
		{"watch with a large first event", "gzip", "/api/v1/pods?watch=true", 0, false, big, false},
		{"watch path", "gzip", "/api/v1/watch/pods", 0, false, big, false},
		{"native watch", "gzip", "/multicache/v1/resources/pods?watch=1", 0, false, big, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := CompressLarge(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.status != 0 {
					w.WriteHeader(tc.status)
					w.WriteHeader(http.StatusTeapot) // superfluous: the first code holds
				}
				if tc.flushFirst {
					w.(http.Flusher).Flush()
				}
				_, _ = w.Write(tc.body)
				_, _ = w.Write([]byte("\n"))
			}), watching)
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", tc.path, nil)
			if tc.accept != "" {
				req.Header.Set("Accept-Encoding", tc.accept)
			}
			h.ServeHTTP(rec, req)
			want := tc.status
			if want == 0 {
				want = 200
			}
			if rec.Code != want {
				t.Fatalf("status %d, want %d", rec.Code, want)
			}
			body := rec.Body.Bytes()
			if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzipped {
				t.Fatalf("gzipped %t, want %t", got, tc.gzipped)
			}
			if tc.gzipped {
				if len(body) >= len(tc.body)/4 {
					t.Errorf("gzipped body %d bytes of %d", len(body), len(tc.body))
				}
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(body, append(append([]byte{}, tc.body...), '\n')) {
				t.Errorf("body differs: %d bytes, want %d", len(body), len(tc.body)+1)
			}
		})
	}
}

// watching tells a watch by its path or its watch parameter (as the test's requests set it).
func watching(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return strings.Contains(r.URL.Path, "/watch/") || (w != "" && w != "false" && w != "0")
}
