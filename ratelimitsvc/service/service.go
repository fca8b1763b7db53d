// Package service implements envoy.service.ratelimit.v3.RateLimitService:
// it matches a request's descriptors against the current rule table, asks
// the bucket store once for the whole request, applies each rule's mode and
// fail mode, and builds Envoy's response with rate-limit headers.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/throttle"
)

// Backend decides a request's buckets atomically (see package bucket).
type Backend interface {
	Check(ctx context.Context, items []bucket.Item) (bucket.Decision, error)
}

var (
	_ Backend = (*bucket.Memory)(nil)
	_ Backend = (*bucket.Redis)(nil)
)

// DefaultKeyPrefix starts every bucket key.
const DefaultKeyPrefix = "portico:rl:"

// Config configures a Service. Zero values take defaults.
type Config struct {
	// Rules is the live rule table (required).
	Rules *rules.Live
	// Backend stores buckets (required).
	Backend Backend
	// KeyPrefix starts every bucket key (default DefaultKeyPrefix); no
	// braces: the key's hash tag follows it.
	KeyPrefix string
	// Registerer receives the metrics (default: a private registry).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Replicas is how many replicas share the limits (default 1). When the
	// backend fails, failMode=OPEN rules fall back to a local bucket at
	// limit/Replicas (rounded up) so the fleet stays near the global limit.
	// SetReplicas changes it at run time (package peers counts the replicas).
	Replicas int
	// Local is the fallback store for degraded mode (default a new
	// Memory; tests inject one with a clock).
	Local *bucket.Memory
	// Now is the clock of token leases (default time.Now).
	Now func() time.Time
	// Events, when set, receives a throttle event per denied (or, for
	// shadow rules, would-be denied) descriptor. Publish must not block.
	Events Publisher
}

// Publisher takes throttle events without blocking (throttle.Queue).
type Publisher interface {
	Publish(throttle.Event) bool
}

var _ Publisher = (*throttle.Queue)(nil)

// degradedReporter is implemented by backends with circuit breakers.
type degradedReporter interface{ Degraded() int }

var _ degradedReporter = (*bucket.Redis)(nil)

// refundReporter is implemented by backends that decide a request slot by
// slot on a Redis Cluster and give back the commits of a denied one.
type refundReporter interface{ Refunds() (given, failed uint64) }

var _ refundReporter = (*bucket.Redis)(nil)

// Service is the RateLimitService. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg       Config
	m         *metrics
	errLog    sampler
	shadowLog sampler
	replicas  atomic.Int64
	leases    leases
}

// SetReplicas sets the replica count the degraded-mode local buckets
// divide limits by; n < 1 means 1. Safe to call while serving.
func (s *Service) SetReplicas(n int) {
	n = max(1, n)
	s.replicas.Store(int64(n))
	s.m.replicas.Set(float64(n))
}

// sampler lets one log line per second through, so an outage or a busy
// shadow rule cannot flood the logs (the metrics count every event).
type sampler struct{ last atomic.Int64 }

func (s *sampler) allow() bool {
	now := time.Now().UnixNano()
	last := s.last.Load()
	return now-last >= int64(time.Second) && s.last.CompareAndSwap(last, now)
}

// New validates cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Rules == nil || cfg.Backend == nil {
		return nil, errors.New("service: Config.Rules and Config.Backend are required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		// Redis Cluster would hash the prefix's braces: every bucket in one slot.
		return nil, fmt.Errorf("service: Config.KeyPrefix %q must not contain { or }", cfg.KeyPrefix)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Local == nil {
		cfg.Local = bucket.NewMemory()
	}
	var degraded func() float64
	if d, ok := cfg.Backend.(degradedReporter); ok {
		degraded = func() float64 { return float64(d.Degraded()) }
	}
	var refunds func() (uint64, uint64)
	if r, ok := cfg.Backend.(refundReporter); ok {
		refunds = r.Refunds
	}
	m, err := newMetrics(cfg.Registerer, degraded, refunds)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, m: m}
	s.leases.now = cfg.Now
	s.SetReplicas(cfg.Replicas)
	return s, nil
}

// match is one descriptor that a limiting rule applies to.
type match struct {
	desc int
	rule *rules.Rule
	item int // index into the items sent to the backend
}

// ShouldRateLimit decides one request. Unknown domains and descriptors are
// OK; only an empty domain is invalid. A traced request's span gets the
// outcome (annotate).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(ctx, req)
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		annotate(sp, req, resp)
	}
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.m.latency.Observe(time.Since(start).Seconds()) }()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "ratelimit: domain must not be empty")
	}
	tab := s.cfg.Rules.Load()
	descs := req.GetDescriptors()
	tenant := tenantOf(req)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	var matches []match
	var replaced map[string]bool
	for i, d := range descs {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		r := tab.Match(req.GetDomain(), entries(d.GetEntries()), tenant)
		if r == nil {
			continue
		}
		// An unlimited limit replaces too, as in envoyproxy/ratelimit.
		for _, n := range r.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[n] = true
		}
		if r.Unlimited {
			resp.Statuses[i].LimitRemaining = math.MaxUint32
			continue
		}
		matches = append(matches, match{desc: i, rule: r})
	}
	if len(matches) == 0 {
		return resp, nil
	}
	items := make([]bucket.Item, 0, len(matches))
	byKey := map[string]int{}
	kept := matches[:0]
	banned := false
	for _, mt := range matches {
		if mt.rule.Name != "" && replaced[mt.rule.Name] {
			continue
		}
		if mt.rule.Limit == 0 { // a ban, as in envoyproxy/ratelimit: no bucket
			mt.item = -1
			kept = append(kept, mt)
			if mt.rule.Mode == rules.Enforce {
				banned = true
			}
			continue
		}
		d := descs[mt.desc]
		cost := uint64(req.GetHitsAddend())
		if h := d.GetHitsAddend(); h != nil {
			cost = h.GetValue()
		} else if cost == 0 {
			cost = 1
		}
		key := s.key(req.GetDomain(), mt.rule, d.GetEntries())
		// Two descriptors landing on one bucket are one item with both costs.
		if j, ok := byKey[key]; ok {
			items[j].Cost = clampCost(items[j], items[j].Cost+min(cost, math.MaxUint32))
			items[j].Veto = items[j].Veto || mt.rule.Mode == rules.Enforce
			mt.item = j
		} else {
			mt.item = len(items)
			byKey[key] = mt.item
			items = append(items, itemFor(mt.rule, key, cost))
		}
		kept = append(kept, mt)
	}
	matches = kept
	ok, over := "ok", "over_limit"
	var dec bucket.Decision
	var err error
	if banned {
		// Denied whatever the buckets say: nothing to ask, nothing consumed.
		dec.Results = make([]bucket.Result, len(items))
		for i := range dec.Results {
			dec.Results[i].Allowed = true
		}
	} else {
		dec, err = s.decide(ctx, matches, items)
	}
	if err != nil {
		var local bool
		if dec, local = s.failed(ctx, req.GetDomain(), matches, items, resp, err); !local {
			return resp, nil
		}
		ok, over = "fail_open", "local_over_limit"
	}
	var worst *match
	var worstRes bucket.Result
	for k := range matches {
		mt := &matches[k]
		var res bucket.Result
		if mt.item >= 0 {
			res = dec.Results[mt.item]
		} else {
			res = bucket.Result{RetryAfter: mt.rule.Window, ResetAfter: mt.rule.Window}
		}
		st := resp.Statuses[mt.desc]
		st.CurrentLimit = currentLimit(mt.rule)
		st.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
		st.DurationUntilReset = durationpb.New(res.ResetAfter)
		mode := "enforce"
		if mt.rule.Mode == rules.Shadow {
			mode = "shadow"
		}
		if !res.Allowed {
			s.m.decision[[2]string{over, mode}].Inc()
			if s.cfg.Events != nil {
				s.cfg.Events.Publish(throttle.Event{Time: time.Now(), Domain: req.GetDomain(), Rule: mt.rule.ID,
					Descriptor: descriptorString(descs[mt.desc].GetEntries()), Tenant: tenant, Shadow: mt.rule.Mode == rules.Shadow})
			}
			if mt.rule.Mode == rules.Shadow {
				if s.shadowLog.allow() {
					s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "shadow rule would deny (sampled: at most one line per second)",
						slog.String("domain", req.GetDomain()), slog.String("rule", mt.rule.ID))
				}
				continue
			}
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			s.m.decision[[2]string{ok, mode}].Inc()
		}
		if mt.rule.Mode == rules.Shadow {
			continue
		}
		if worst == nil || moreRestrictive(res, mt.rule, worstRes, worst.rule) {
			worst, worstRes = mt, res
		}
	}
	if worst != nil {
		resp.ResponseHeadersToAdd = headers(worst.rule, worstRes, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT)
	}
	return resp, nil
}

// decide asks the leases, then the backend, for a decision on items.
func (s *Service) decide(ctx context.Context, matches []match, items []bucket.Item) (bucket.Decision, error) {
	var hv []bool
	for _, mt := range matches {
		if mt.rule.HighVolume && mt.rule.Mode == rules.Enforce && mt.item >= 0 {
			if hv == nil {
				hv = make([]bool, len(items))
			}
			hv[mt.item] = true
		}
	}
	if hv == nil {
		return s.cfg.Backend.Check(ctx, items)
	}
	// A request that finds its lease short while a batch is on its way
	// waits for it instead of calling the store too — once: if that batch
	// does not cover it either, it calls the store itself. The wait and the
	// call share one store timeout, so leasing never adds more than one
	// timeout to a request; a call left without budget fails like a slow
	// store (fail modes apply).
	if b, ok := s.cfg.Backend.(interface{ Timeout() time.Duration }); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout())
		defer cancel()
	}
	for range 2 {
		if dec, done := s.leases.try(items, hv); done {
			s.m.leaseLocal.Inc()
			return dec, nil
		}
		wait := s.leases.inflight(items, hv)
		if wait == nil {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return bucket.Decision{}, fmt.Errorf("%w: %w", bucket.ErrBackend, ctx.Err())
		}
	}
	owned := s.leases.prepare(items, hv)
	dec, err := s.cfg.Backend.Check(ctx, items)
	s.leases.settle(items, hv, owned, dec, err)
	return dec, err
}

// failed applies fail modes when the backend could not answer. If an
// ENFORCE rule fails CLOSED, the request is denied here (nothing is
// consumed anywhere) and local is false. Otherwise every rule fails OPEN
// to a local bucket at limit/replicas, and the local decision is returned
// for the caller to build the response from as usual.
func (s *Service) failed(ctx context.Context, domain string, matches []match, items []bucket.Item,
	resp *rlsv3.RateLimitResponse, err error) (dec bucket.Decision, local bool) {
	if errors.Is(err, bucket.ErrBreakerOpen) {
		s.m.breakerRejected.Inc()
	} else {
		s.m.backendErrors.Inc()
		if s.errLog.allow() {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bucket backend failed; applying fail modes (sampled: at most one line per second)",
				slog.String("domain", domain), slog.String("error", err.Error()))
		}
	}
	closed := false
	for _, mt := range matches {
		if mt.rule.FailMode == rules.FailClosed && mt.rule.Mode == rules.Enforce {
			closed = true
		}
	}
	if closed {
		degraded(ctx, "fail_closed", err)
		for _, mt := range matches {
			st := resp.Statuses[mt.desc]
			st.CurrentLimit = currentLimit(mt.rule)
			if mt.rule.FailMode == rules.FailClosed && mt.rule.Mode == rules.Enforce {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				s.m.decision[[2]string{"fail_closed", "enforce"}].Inc()
			}
		}
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "Retry-After", Value: "1"}}
		s.m.degradedClosed.Inc()
		return bucket.Decision{}, false
	}
	s.m.degradedOpen.Inc()
	degraded(ctx, "fail_open", err)
	n := uint64(s.replicas.Load())
	scaled := make([]bucket.Item, len(items))
	for i, it := range items {
		scaled[i] = localItem(it, n)
	}
	// Memory never fails.
	dec, _ = s.cfg.Local.Check(ctx, scaled)
	return dec, true
}

// localItem is its share for one of n replicas: limit and capacity
// divided by n, rounded up so that no share is zero.
func localItem(it bucket.Item, n uint64) bucket.Item {
	it.Limit = max(1, (it.Limit+n-1)/n)
	it.Capacity = max(it.Limit, (it.Capacity+n-1)/n)
	it.Cost = clampCost(it, it.Cost)
	it.Lease = 0
	return it
}

func modeLabel(r *rules.Rule) string {
	if r.Mode == rules.Shadow {
		return "shadow"
	}
	return "enforce"
}

// moreRestrictive orders candidates for the X-RateLimit-* headers: a denial
// beats an allow (the longer retry first), then fewer remaining, then the
// smaller limit.
func moreRestrictive(a bucket.Result, ar *rules.Rule, b bucket.Result, br *rules.Rule) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return ar.Limit < br.Limit
}

// ceilSeconds rounds up: rounding down invites a retry that fails again.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func headers(r *rules.Rule, res bucket.Result, over bool) []*corev3.HeaderValue {
	h := []*corev3.HeaderValue{
		{Key: "X-RateLimit-Limit", Value: strconv.FormatUint(uint64(r.Limit), 10)},
		{Key: "X-RateLimit-Remaining", Value: strconv.FormatUint(res.Remaining, 10)},
		{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(ceilSeconds(res.ResetAfter), 10)},
	}
	if over {
		h = append(h, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(1, ceilSeconds(res.RetryAfter)), 10)})
	}
	return h
}

func itemFor(r *rules.Rule, key string, cost uint64) bucket.Item {
	it := bucket.Item{Key: key, Limit: uint64(r.Limit), Capacity: r.Capacity(), Window: r.Window, Veto: r.Mode == rules.Enforce}
	switch r.Algorithm {
	case rules.FixedWindow:
		it.Kind = bucket.FixedWindow
	case rules.SlidingWindow:
		it.Kind, it.Capacity = bucket.SlidingWindow, uint64(r.Limit)
	}
	it.Cost = clampCost(it, cost)
	return it
}

// clampCost caps a cost at one more than the bucket can ever hold: such a
// request is denied either way, and the cap keeps the bucket arithmetic
// (cost × window in ms) exact and free of overflow whatever hits_addend a
// client sends.
func clampCost(it bucket.Item, cost uint64) uint64 {
	most := it.Capacity
	if it.Kind != bucket.TokenBucket {
		most = it.Limit
	}
	return min(cost, most+1)
}

// key names a bucket: prefix{domain|k=v&k=v}:rule:window-ms, everything
// between the braces query-escaped. The hash tag is the domain and the
// descriptor's entries as the bucket counts them (a shared wildcard's
// pattern, not the value), so on a Redis Cluster the buckets of different
// callers spread over the slots while a bucket's key depends on nothing but
// the bucket: whatever other descriptors come along in a request, and in
// whichever order, a limit is counted in one place. A request whose
// descriptors differ is decided slot by slot (bucket.Redis). A new limit or
// burst keeps the bucket (capacity is a script argument); a new window
// starts a fresh one, because stored tokens are scaled by the window.
func (s *Service) key(domain string, r *rules.Rule, es []*rlsEntry) string {
	var b strings.Builder
	b.Grow(len(s.cfg.KeyPrefix) + len(domain) + len(r.ID) + 32)
	b.WriteString(s.cfg.KeyPrefix)
	b.WriteByte('{')
	b.WriteString(url.QueryEscape(domain))
	b.WriteByte('|')
	for i, e := range es {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(e.GetKey()))
		b.WriteByte('=')
		if i < len(r.Descriptors) && r.Descriptors[i].Shared {
			b.WriteString(url.QueryEscape(r.Descriptors[i].Value)) // one bucket for the pattern
		} else {
			b.WriteString(url.QueryEscape(e.GetValue()))
		}
	}
	b.WriteString("}:")
	b.WriteString(r.ID)
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(r.Window.Milliseconds(), 10))
	return b.String()
}

// tenantOf returns the value of the first "tenant" entry in the request.
func tenantOf(req *rlsv3.RateLimitRequest) string {
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetKey() == rules.TenantKey {
				return e.GetValue()
			}
		}
	}
	return ""
}

var units = []struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
}

// currentLimit expresses a rule in Envoy's units: the window's own unit
// when it is one, else the smallest unit the window divides evenly
// (100 per 5m = 1200 per hour), else UNKNOWN with the raw limit.
func currentLimit(r *rules.Rule) *rlsv3.RateLimitResponse_RateLimit {
	out := &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.Limit}
	for _, u := range units {
		if u.d >= r.Window && u.d%r.Window == 0 {
			if n := uint64(r.Limit) * uint64(u.d/r.Window); n <= math.MaxUint32 {
				out.Unit, out.RequestsPerUnit = u.u, uint32(n)
				return out
			}
		}
	}
	return out
}

type rlsEntry = ratelimitcommonv3.RateLimitDescriptor_Entry

// descriptorString renders entries as k=v&k=v (query-escaped).
func descriptorString(es []*rlsEntry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(e.GetKey()))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(e.GetValue()))
	}
	return b.String()
}

func entries(es []*rlsEntry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return out
}
