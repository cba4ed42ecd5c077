package shard

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/multicache/multicache/pkg/clusterset"
)

// Options configures a Coordinator. Errors name each field as the config file (section
// `sharding`) or the command line names it.
type Options struct {
	// Client reaches the management cluster, where the Leases live. Required. Peer renewals and
	// fence writes share its client-side rate limit: with client-go's default (5 QPS) a burst of
	// fence writes (start-up, a peer's death) can delay renewals into self-fencing, so give it
	// room (tens of QPS).
	Client kubernetes.Interface
	// Namespace holds the Leases (sharding.namespace). Required.
	Namespace string
	// Identity is this replica's name among its peers (sharding.identity). It must be unique
	// among the replicas: a replica that reuses a dead one's name takes its fences at once.
	// Default: the host name and "-" and 5 random lowercase alphanumerics. Valid when
	// "multicache-peer-" + Identity is a DNS label.
	Identity string
	// AdvertiseURL is how peers reach this replica, an http or https URL (--advertise-url).
	// Required. It is published in the peer Lease, so it must not carry credentials.
	AdvertiseURL string
	// LeaseDuration is how long a peer stays live without renewing (sharding.leaseDuration).
	// Default 15s; at least 1s. Peers renew every third of it; a dead replica's clusters move
	// within about one LeaseDuration.
	LeaseDuration time.Duration
	// Weight is this replica's share of the fleet relative to its peers' (sharding.weight).
	// Default 1; at least 1.
	Weight int
	// MaxWarmups bounds how many owned clusters may be running but not yet synced at once
	// (sharding.maxWarmups). Default 4; at least 1.
	MaxWarmups int
	// MaxHandovers bounds, apart from MaxWarmups, how many clusters that a peer handed over
	// may be warming at once (sharding.maxHandovers). A cluster counts as handed over when
	// this replica saw its fence come from another holder naming where its state waits
	// (multicache.io/handed-over-from, written only when that holder kept a state or may yet:
	// Coordinator.SetKept), for clusterset.ShelfMaxAge after that, while it holds the fence;
	// not on its first pass, so a restart counts none. Such a cluster starts from the state its peer kept and costs
	// its member API server a watch, not a list (Secrets, never handed over, list). One whose
	// state is gone by the time it is asked for (expired, its replica gone, or refused by the
	// member: 410) lists in its handover slot, so that up to MaxWarmups + MaxHandovers lists
	// may run at once. Default 16; -1: they take MaxWarmups' slots as any other cluster.
	MaxHandovers int
	// Source yields the whole fleet; every replica must load the same. Required.
	Source clusterset.Source
	// Logger. Default: no-op.
	Logger *zap.Logger
	// Metrics, when set, receives the multicache_shard_* collectors.
	Metrics prometheus.Registerer
	// Clock measures liveness and paces renewals. Default: the real clock.
	Clock clock.Clock
	// Verify, when set, proves a peer before its Lease counts: it returns nil once the peer's
	// advertised URL has answered with a peer certificate that names the peer's ID (see
	// storage/peer.Trust.Verify). Until then, and whenever the Lease advertises another URL
	// than the one proved, the peer counts as not live: it owns nothing, is handed nothing,
	// the fences it holds are taken over as a dead peer's, and no request, identity or
	// handover goes to it. Attempts are retried, at most every 30s. Nil: every peer Lease
	// counts (replicas without peer certificates, which run with auth off on loopback).
	Verify func(ctx context.Context, id, url string) error
}

// maxIdentity is the longest Identity whose peer Lease name is still a DNS label (63).
const maxIdentity = 63 - len(peerPrefix)

// Default fills every unset field with its default.
func (o *Options) Default() {
	if o.Identity == "" {
		host, _ := os.Hostname()
		o.Identity = labelPrefix(host, maxIdentity-6) + "-" + utilrand.String(5)
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.Weight == 0 {
		o.Weight = 1
	}
	if o.MaxWarmups == 0 {
		o.MaxWarmups = 4
	}
	if o.MaxHandovers == 0 {
		o.MaxHandovers = 16
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// labelPrefix turns a host name into at most max characters usable at the start of a DNS
// label: lower case, anything but [a-z0-9] turned into '-', no '-' at either end. Never empty.
func labelPrefix(host string, max int) string {
	b := []byte(strings.ToLower(host))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	s := strings.Trim(string(b), "-")
	if s == "" {
		return "multicache"
	}
	return s
}

// Validate reports every bad field, each named as the config file or the command line names
// it ("sharding.leaseDuration", "--advertise-url").
func (o Options) Validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("shard: Options.Client is required"))
	}
	if o.Source == nil {
		errs = append(errs, errors.New("shard: Options.Source is required"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("sharding.namespace: required (the namespace of the Leases in the management cluster)"))
	} else if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("sharding.namespace: %q: not a namespace name: %s", o.Namespace, strings.Join(msgs, "; ")))
	}
	if err := ValidateIdentity(o.Identity); err != nil {
		errs = append(errs, fmt.Errorf("sharding.identity: %w", err))
	}
	if err := validateURL(o.AdvertiseURL); err != nil {
		errs = append(errs, fmt.Errorf("--advertise-url: %w", err))
	}
	if o.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("sharding.leaseDuration: %s: must be at least 1s", o.LeaseDuration))
	}
	if o.Weight < 1 || o.Weight > MaxWeight {
		errs = append(errs, fmt.Errorf("sharding.weight: %d: must be from 1 to %d", o.Weight, MaxWeight))
	}
	if o.MaxWarmups < 1 {
		errs = append(errs, fmt.Errorf("sharding.maxWarmups: %d: must be at least 1", o.MaxWarmups))
	}
	if o.MaxHandovers < -1 {
		errs = append(errs, fmt.Errorf("sharding.maxHandovers: %d: want -1 (handovers take warm-up slots), 0 (the default, 16) or more", o.MaxHandovers))
	}
	return errors.Join(errs...)
}

// ValidateIdentity says why id cannot name a replica: its peer Lease's name,
// "multicache-peer-" + id, must be a DNS label.
func ValidateIdentity(id string) error {
	if id == "" {
		return errors.New("required")
	}
	if msgs := validation.IsDNS1123Label(peerPrefix + id); len(msgs) > 0 {
		return fmt.Errorf("%q: %q is not a valid DNS label: %s", id, peerPrefix+id, strings.Join(msgs, "; "))
	}
	return nil
}

// validateURL accepts an absolute http or https URL with a host and no user information. Its
// errors never repeat the URL, which might hold a password.
func validateURL(s string) error {
	if s == "" {
		return errors.New("required (how peers reach this replica, an http or https URL)")
	}
	u, err := url.Parse(s)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL itself
		}
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.User != nil {
		return errors.New("must not carry user information: it is published in the peer Lease")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: must be http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	return nil
}
