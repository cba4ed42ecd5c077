package server

import (
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage/local"
)

type metrics struct {
	requests    *prometheus.HistogramVec
	watches     prometheus.Gauge
	peerLatency *prometheus.HistogramVec
}

// statusCollector reads the registry on every scrape, so the figures are never stale.
type statusCollector struct {
	s                                  *Server
	state, objects, restarts, lastSync *prometheus.Desc
	events, queue, watchOverflows, lag *prometheus.Desc
	syncSeconds, hubResets             *prometheus.Desc
	listLoaded, listExpected, listing  *prometheus.Desc
	ringEvents, ringBytes              *prometheus.Desc
	learnedBytes, learnedAnswers       *prometheus.Desc
	sortBytes, sortAnswers             *prometheus.Desc
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.objects, c.restarts, c.lastSync, c.events, c.queue, c.watchOverflows, c.lag, c.syncSeconds, c.hubResets, c.ringEvents, c.ringBytes, c.listLoaded, c.listExpected, c.listing, c.learnedBytes, c.learnedAnswers, c.sortBytes, c.sortAnswers} {
		ch <- d
	}
}

var allStates = []clusterset.State{clusterset.Pending, clusterset.Syncing, clusterset.Synced, clusterset.Degraded, clusterset.Failed, clusterset.NotServed}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.s.local.ObjectCounts()
	for _, cs := range c.s.reg.Status() {
		for _, rs := range cs.Resources {
			for _, st := range allStates {
				v := 0.0
				if rs.State == st {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, cs.Name, rs.Resource, string(st))
			}
			ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(counts[cs.Name][rs.Resource]), cs.Name, rs.Resource)
			ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(rs.WatchRestarts), cs.Name, rs.Resource)
			p := rs.Progress
			ch <- prometheus.MustNewConstMetric(c.listLoaded, prometheus.GaugeValue, float64(p.Loaded), cs.Name, rs.Resource)
			if p.Expected > 0 {
				ch <- prometheus.MustNewConstMetric(c.listExpected, prometheus.GaugeValue, float64(p.Expected), cs.Name, rs.Resource)
			}
			listing := 0.0
			if p.Listing {
				listing = 1
			}
			ch <- prometheus.MustNewConstMetric(c.listing, prometheus.GaugeValue, listing, cs.Name, rs.Resource)
			if rs.SyncDuration > 0 {
				ch <- prometheus.MustNewConstMetric(c.syncSeconds, prometheus.GaugeValue, rs.SyncDuration.Seconds(), cs.Name, rs.Resource)
			}
			if !rs.LastSync.IsZero() {
				ch <- prometheus.MustNewConstMetric(c.lastSync, prometheus.GaugeValue, float64(rs.LastSync.Unix()), cs.Name, rs.Resource)
			}
		}
	}
	for _, res := range c.s.reg.Resources() {
		st := c.s.local.Cache(res).Stats()
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(st.Events), res)
		ch <- prometheus.MustNewConstMetric(c.watchOverflows, prometheus.CounterValue, float64(st.Expired), res)
		ch <- prometheus.MustNewConstMetric(c.hubResets, prometheus.CounterValue, float64(st.Resets), res)
		ch <- prometheus.MustNewConstMetric(c.ringEvents, prometheus.GaugeValue, float64(st.Held), res)
		ch <- prometheus.MustNewConstMetric(c.ringBytes, prometheus.GaugeValue, float64(st.Bytes), res)
	}
	for _, res := range c.s.reg.Resources() {
		r := c.s.local.Registration(res)
		ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(r.Pending()), res, "watch-hub")
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, r.Lag().Seconds(), res, "watch-hub")
		if agg, ok := c.s.reg.Aggregate(res); ok {
			for _, li := range agg.LearnedIndexes() {
				ch <- prometheus.MustNewConstMetric(c.learnedBytes, prometheus.GaugeValue, float64(li.Bytes), res, li.Key)
				ch <- prometheus.MustNewConstMetric(c.learnedAnswers, prometheus.CounterValue, float64(li.Answers), res, li.Key)
			}
			for _, si := range agg.SortIndexes() {
				ch <- prometheus.MustNewConstMetric(c.sortBytes, prometheus.GaugeValue, float64(si.Bytes), res, si.Name)
				ch <- prometheus.MustNewConstMetric(c.sortAnswers, prometheus.CounterValue, float64(si.Answers), res, si.Name)
			}
		}
	}
}

func newMetrics(s *Server, reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "multicache_http_request_duration_seconds", Help: "HTTP request latency by route and code (watches: their whole life).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"route", "code"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "multicache_watches", Help: "Open watch streams."}),
		peerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "multicache_peer_request_duration_seconds", Help: "Calls to other replicas for a fan-out answer: time until its answer starts, by kind and code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"kind", "code"}),
	}
	sc := &statusCollector{
		s:              s,
		state:          prometheus.NewDesc("multicache_resource_state", "1 for the state each cluster × resource is in.", []string{"cluster", "resource", "state"}, nil),
		objects:        prometheus.NewDesc("multicache_objects", "Objects cached per cluster × resource.", []string{"cluster", "resource"}, nil),
		restarts:       prometheus.NewDesc("multicache_watch_restarts_total", "Failed list and watch calls of the reflector (it retries each).", []string{"cluster", "resource"}, nil),
		lastSync:       prometheus.NewDesc("multicache_last_sync_timestamp_seconds", "When the cache was last known in step with the server.", []string{"cluster", "resource"}, nil),
		events:         prometheus.NewDesc("multicache_events_total", "Events seen by the watch hub per resource (rate() gives events/s).", []string{"resource"}, nil),
		queue:          prometheus.NewDesc("multicache_handler_queue_depth", "Events queued for a handler and not yet delivered.", []string{"resource", "handler"}, nil),
		listLoaded:     prometheus.NewDesc("multicache_list_objects_loaded", "Objects the API server has sent for the latest initial list or relist, per cluster × resource.", []string{"cluster", "resource"}, nil),
		listExpected:   prometheus.NewDesc("multicache_list_objects_expected", "The latest list's total as the API server reported it (absent when it did not say).", []string{"cluster", "resource"}, nil),
		listing:        prometheus.NewDesc("multicache_list_in_progress", "1 while an initial list or relist is under way.", []string{"cluster", "resource"}, nil),
		syncSeconds:    prometheus.NewDesc("multicache_initial_sync_seconds", "How long the initial list (sync) took per cluster × resource.", []string{"cluster", "resource"}, nil),
		learnedBytes:   prometheus.NewDesc("multicache_learned_index_bytes", "Estimated memory of a learned index (a summary key asked again) or a kept one (counts: in the config; namespace always), counted per cluster and value.", []string{"resource", "key"}, nil),
		learnedAnswers: prometheus.NewDesc("multicache_learned_index_answers_total", "Summaries a learned or kept index answered without a scan.", []string{"resource", "key"}, nil),
		sortBytes:      prometheus.NewDesc("multicache_sort_index_bytes", "Estimated memory of a sort index: an order of sorted lists asked again, every object per cluster in that order.", []string{"resource", "order"}, nil),
		sortAnswers:    prometheus.NewDesc("multicache_sort_index_answers_total", "Sorted pages a sort index answered without reading every object.", []string{"resource", "order"}, nil),
		lag:            prometheus.NewDesc("multicache_handler_lag_seconds", "How long the last delivered event waited in the handler's queue.", []string{"resource", "handler"}, nil),
		watchOverflows: prometheus.NewDesc("multicache_watch_overflows_total", "Watches ended with 410 because events they had not read were evicted from the watch ring.", []string{"resource"}, nil),
		hubResets:      prometheus.NewDesc("multicache_watch_hub_resets_total", "Times the watch hub's backlog passed its bound: events were dropped, every watch ended with 410.", []string{"resource"}, nil),
		ringEvents:     prometheus.NewDesc("multicache_watch_ring_events", "Events the watch ring holds for watches to resume from.", []string{"resource"}, nil),
		ringBytes:      prometheus.NewDesc("multicache_watch_ring_bytes", "Estimated memory the watch ring keeps alive (objects and previous states).", []string{"resource"}, nil),
	}
	for _, c := range []prometheus.Collector{m.requests, m.watches, m.peerLatency, sc, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// handleMetrics serves the registry's metrics; a series labelled with a cluster the caller may
// not read is left out.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	names := s.reg.Clusters()
	ok, _, err := local.Scope(r.Context(), auth.AccessOf(r.Context()), false, nil, names)
	if err != nil {
		filters.WriteAPIError(w, err)
		return
	}
	var g prometheus.Gatherer = s.opts.Metrics
	if ok != nil { // nil: the caller reads every cluster
		readable := sets.New(ok...)
		g = clusterScoped{g: g, keep: readable.Has}
	}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// clusterScoped gathers g's metrics without the series whose cluster label keep refuses.
type clusterScoped struct {
	g    prometheus.Gatherer
	keep func(cluster string) bool
}

func (c clusterScoped) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := c.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		mf.Metric = slices.DeleteFunc(mf.Metric, func(m *dto.Metric) bool {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					return !c.keep(l.GetValue())
				}
			}
			return false
		})
		if len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}
