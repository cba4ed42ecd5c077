package fakeapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Server is one fake API server on 127.0.0.1, closed when the test ends.
type Server struct {
	srv *httptest.Server

	mu   sync.Mutex
	slow chan struct{} // while open, lists hang
	down bool
	pods []corev1.Pod // what a list of pods returns
	// openAPIReads counts the reads of the OpenAPI v3 document of v1.
	openAPIReads int
	// podLists are the queries of the LIST requests of pods, in order (watches not included).
	podLists []url.Values
	// watchLists counts the watch-list requests of pods (refused).
	watchLists int
}

// New starts a Server for t.
func New(t testing.TB) *Server {
	f := &Server{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// SetPods sets what a list of pods returns (nothing by default).
func (f *Server) SetPods(pods []corev1.Pod) {
	f.mu.Lock()
	f.pods = pods
	f.mu.Unlock()
}

// OpenAPIReads is how many times the OpenAPI v3 document of v1 was read.
func (f *Server) OpenAPIReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.openAPIReads
}

// PodLists are the queries of the LIST requests of pods so far, in order; watches are not lists.
func (f *Server) PodLists() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.podLists...)
}

// WatchLists is how many watch-lists of pods (watch=true&sendInitialEvents=true) were asked for;
// the server refuses them, as one without the feature does.
func (f *Server) WatchLists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchLists
}

// Config reaches the server.
func (f *Server) Config() *rest.Config { return &rest.Config{Host: f.srv.URL} }

// SetSlow makes lists hang (true) or answer (false).
func (f *Server) SetSlow(slow bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case slow && f.slow == nil:
		f.slow = make(chan struct{})
	case !slow && f.slow != nil:
		close(f.slow)
		f.slow = nil
	}
}

// SetDown makes every request fail with 500 (true) or not (false).
func (f *Server) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down, slow, pods := f.down, f.slow, f.pods
	f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	if down {
		reply(500, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "message": "down for the test"})
		return
	}
	q := r.URL.Query()
	switch r.URL.Path {
	case "/version":
		reply(200, map[string]string{"major": "1", "minor": "37", "gitVersion": "v1.37.1"})
	case "/api":
		reply(200, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []any{map[string]string{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}}})
	case "/apis":
		reply(200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	case "/api/v1":
		reply(200, map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			map[string]any{"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": []string{"get", "list", "watch"}, "shortNames": []string{"po"}},
		}})
	case "/openapi/v3":
		reply(200, map[string]any{"paths": map[string]any{"api/v1": map[string]string{"serverRelativeURL": "/openapi/v3/api/v1?hash=F1"}}})
	case "/openapi/v3/api/v1":
		f.mu.Lock()
		f.openAPIReads++
		f.mu.Unlock()
		reply(200, map[string]any{"openapi": "3.0.0", "info": map[string]string{"title": "fake", "version": "v1"},
			"components": map[string]any{"schemas": map[string]any{"io.k8s.api.core.v1.Pod": map[string]any{
				"description": "Pod is a collection of containers.", "type": "object"}}}})
	case "/openapi/v2":
		// Two group-versions, each with a path and a definition that name this server.
		reply(200, map[string]any{"swagger": "2.0", "info": map[string]string{"title": "fake", "version": "v1"},
			"paths": map[string]any{
				"/api/v1/pods":         map[string]any{"get": map[string]any{"description": "pods of " + f.srv.URL, "responses": map[string]any{"200": map[string]any{"description": "OK", "schema": map[string]string{"$ref": "#/definitions/io.k8s.api.core.v1.Pod"}}}}},
				"/apis/x.io/v1/things": map[string]any{"get": map[string]any{"description": "things of " + f.srv.URL, "responses": map[string]any{"200": map[string]any{"description": "OK", "schema": map[string]string{"$ref": "#/definitions/io.x.v1.Thing"}}}}},
			},
			"definitions": map[string]any{
				"io.k8s.api.core.v1.Pod": map[string]any{"description": "Pod of " + f.srv.URL, "type": "object"},
				"io.x.v1.Thing":          map[string]any{"description": "Thing of " + f.srv.URL, "type": "object"},
			}})
	case "/api/v1/pods":
		switch {
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			f.mu.Lock()
			f.watchLists++
			f.mu.Unlock()
			reply(400, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "reason": "BadRequest", "message": "no watch-list here"})
		case q.Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			f.mu.Lock()
			f.podLists = append(f.podLists, q)
			f.mu.Unlock()
			if slow != nil {
				select {
				case <-slow:
				case <-r.Context().Done():
					return
				}
			}
			if pods == nil {
				pods = []corev1.Pod{}
			}
			reply(200, map[string]any{"kind": "PodList", "apiVersion": "v1", "metadata": map[string]string{"resourceVersion": "1"}, "items": pods})
		}
	default:
		reply(404, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not here"})
	}
}
