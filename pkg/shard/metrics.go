package shard

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one Coordinator's collectors; registered only when Options.Metrics is set.
type metrics struct {
	owned, unowned, livePeers prometheus.Gauge
	warming, queued           prometheus.Gauge
	handoffIn, handoffOut     prometheus.Counter
	peerWrites, fenceWrites   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	handoffs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "multicache_shard_handoffs_total",
		Help: "Fences this replica took over (in) or handed over or released (out).",
	}, []string{"direction"})
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "multicache_shard_lease_writes_total",
		Help: "Lease writes (create, update, delete) this replica sent, by Lease kind.",
	}, []string{"kind"})
	m := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_shard_owned_clusters",
			Help: "Fences held by this replica, as observed.",
		}),
		unowned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_shard_unowned_clusters",
			Help: "Clusters of the fleet whose fence is missing or has no live holder, as observed.",
		}),
		livePeers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_shard_live_peers",
			Help: "Live replicas, this one included, as observed.",
		}),
		warming: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_shard_warming_clusters",
			Help: "Clusters this replica offers that are not yet running and synced, as of its last look.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_shard_queued_clusters",
			Help: "Clusters this replica owns that wait for a warm-up slot (sharding.maxWarmups, or sharding.maxHandovers for those a peer handed over).",
		}),
		handoffIn:   handoffs.WithLabelValues("in"),
		handoffOut:  handoffs.WithLabelValues("out"),
		peerWrites:  writes.WithLabelValues(kindPeer),
		fenceWrites: writes.WithLabelValues(kindFence),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.owned, m.unowned, m.livePeers, m.warming, m.queued, handoffs, writes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("shard: registering metrics: %w", err)
		}
	}
	return m, nil
}
