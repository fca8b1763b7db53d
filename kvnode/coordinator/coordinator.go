// Package coordinator is the per-request coordinator role: any node builds
// the key's preference list, fans the request out to the replicas over the
// internode protocol and waits for the consistency level's quorum. Writes
// go to every replica (plus pending owners during a join or leave) and
// store hints for replicas that miss them; reads ask the fastest replicas
// for one full value and digests, retry speculatively past the p99, and on
// a mismatch merge and repair the stale replicas before replying.
package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/kvnode/hlc"
	"github.com/portico-io/portico/kvnode/record"
	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Defaults for Config.
const (
	DefaultTimeout        = 2 * time.Second
	DefaultSpeculativeMin = 10 * time.Millisecond
	DefaultIdempotencyTTL = 10 * time.Minute
	DefaultIdempotencyMax = 100_000
	DefaultMaxBatch       = 100
)

// Topology answers where a key lives and who is up.
type Topology interface {
	// Placement returns the key's replicas in the serving ring and the extra
	// replicas it gains in the pending ring (during a join or leave).
	Placement(token uint64) (current, pending []string)
	Alive(id string) bool
}

// Transport reaches replicas, the local one included.
type Transport interface {
	Apply(ctx context.Context, node string, entries []*kvv1.Entry) error
	Read(ctx context.Context, node string, key []byte, digestOnly bool) (*kvv1.ReadResponse, error)
	// ApplyDotted has a replica give e's records dots of its own, merge
	// them and return its resulting sibling set (vector-clock writes).
	ApplyDotted(ctx context.Context, node string, e *kvv1.Entry) (*kvv1.Entry, error)
}

// HintStore keeps writes a replica missed.
type HintStore interface {
	Add(target string, e *kvv1.Entry) error
}

// Config configures New. Zero values take the defaults.
type Config struct {
	NodeID string
	// WriteTimeout and ReadTimeout bound one request's wait for its quorum.
	WriteTimeout, ReadTimeout time.Duration
	// SpeculativeMin is the floor of the speculative-retry threshold (the
	// recent p99 replica read latency).
	SpeculativeMin time.Duration
	// VClockKeyspaces lists keyspaces (the part of a key before the first
	// ':') resolved with vector clocks; every other keyspace is LWW.
	VClockKeyspaces []string
	IdempotencyTTL  time.Duration
	IdempotencyMax  int
	MaxBatch        int
	Clock           *hlc.Clock
	Now             func() time.Time
	Logger          *slog.Logger
	// Registerer receives the coordinator's metrics (nil: none).
	Registerer prometheus.Registerer
}

// Coordinator is safe for concurrent use.
type Coordinator struct {
	cfg   Config
	topo  Topology
	tr    Transport
	hints HintStore
	bg    context.Context // fan-out outlives the client request, not the node
	lat   *latency
	idem  *idempotency

	ReadRepairs     atomic.Int64
	SpeculativeRuns atomic.Int64
	HintsWritten    atomic.Int64

	duration *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
}

// New returns a coordinator whose background replication lives until bg
// ends.
func New(bg context.Context, cfg Config, topo Topology, tr Transport, hints HintStore) (*Coordinator, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("coordinator: NodeID is required")
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultTimeout
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultTimeout
	}
	if cfg.SpeculativeMin <= 0 {
		cfg.SpeculativeMin = DefaultSpeculativeMin
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if cfg.IdempotencyMax <= 0 {
		cfg.IdempotencyMax = DefaultIdempotencyMax
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Clock == nil {
		cfg.Clock = hlc.New(cfg.Now, 0)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{
		cfg: cfg, topo: topo, tr: tr, hints: hints, bg: bg,
		lat:  newLatency(),
		idem: newIdempotency(cfg.IdempotencyTTL, cfg.IdempotencyMax, cfg.Now),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portico_kvnode_request_duration_seconds",
			Help:    "Coordinated request latency by operation and consistency level.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"op", "consistency"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_kvnode_requests_total",
			Help: "Coordinated requests by operation, consistency level and outcome.",
		}, []string{"op", "consistency", "outcome"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(c.duration, c.outcomes)
	}
	return c, nil
}

func (c *Coordinator) observe(op string, l Level, start time.Time, err error) {
	c.duration.WithLabelValues(op, l.String()).Observe(time.Since(start).Seconds())
	outcome := "ok"
	switch {
	case errors.Is(err, ErrUnavailable):
		outcome = "unavailable"
	case errors.Is(err, ErrTimeout):
		outcome = "timeout"
	case err != nil:
		outcome = "error"
	}
	c.outcomes.WithLabelValues(op, l.String(), outcome).Inc()
}

// Keyspace is the part of key before the first ':' (the whole key if none).
func Keyspace(key []byte) string {
	if i := bytes.IndexByte(key, ':'); i >= 0 {
		return string(key[:i])
	}
	return string(key)
}

// VectorClocks reports whether key's keyspace uses vector-clock mode.
func (c *Coordinator) VectorClocks(key []byte) bool {
	return slices.Contains(c.cfg.VClockKeyspaces, Keyspace(key))
}

// WriteOptions are per-request knobs of Put and Delete.
type WriteOptions struct {
	Level Level
	// TTL expires the value after this long (0: never).
	TTL time.Duration
	// Context is the causal context the client read (vector-clock mode).
	Context []*kvv1.VersionEntry
	// IdempotencyKey de-duplicates retries at this coordinator.
	IdempotencyKey string
}

// WriteResult reports a successful write.
type WriteResult struct {
	Acks, N int
	// Replayed is set when the result is a de-duplicated retry.
	Replayed bool
}

// Put writes value under key.
func (c *Coordinator) Put(ctx context.Context, key, value []byte, o WriteOptions) (WriteResult, error) {
	return c.write(ctx, "put", key, value, false, o)
}

// Delete writes a tombstone for key.
func (c *Coordinator) Delete(ctx context.Context, key []byte, o WriteOptions) (WriteResult, error) {
	return c.write(ctx, "delete", key, nil, true, o)
}

func (c *Coordinator) write(ctx context.Context, op string, key, value []byte, tomb bool, o WriteOptions) (res WriteResult, err error) {
	start := time.Now()
	defer func() { c.observe(op, o.Level, start, err) }()
	run := func() (WriteResult, error) { return c.doWrite(ctx, key, value, tomb, o) }
	if o.IdempotencyKey == "" {
		return run()
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%d\x00", op, len(key), key, o.TTL)
	h.Write(value)
	var fp [32]byte
	copy(fp[:], h.Sum(nil))
	r, replayed, err := c.idem.do(ctx, o.IdempotencyKey, fp, run)
	r.Replayed = replayed
	return r, err
}

func (c *Coordinator) newRecord(key, value []byte, tomb bool, o WriteOptions) *kvv1.Record {
	ts := c.cfg.Clock.Now()
	r := &kvv1.Record{Timestamp: ts, Tombstone: tomb, Value: value}
	if o.TTL > 0 && !tomb {
		r.ExpiresAtUnixMs = c.cfg.Now().Add(o.TTL).UnixMilli()
	}
	if c.VectorClocks(key) {
		// The dot is assigned by the coordinating replica (ApplyDotted).
		r.Context = o.Context
	}
	return r
}

func (c *Coordinator) doWrite(ctx context.Context, key, value []byte, tomb bool, o WriteOptions) (WriteResult, error) {
	p, err := c.place(key, o.Level)
	if err != nil {
		return WriteResult{}, err
	}
	entry := &kvv1.Entry{Key: key, Siblings: &kvv1.Siblings{Records: []*kvv1.Record{c.newRecord(key, value, tomb, o)}}}
	return c.replicate(ctx, entry, p, c.VectorClocks(key))
}

// ApplyEntry writes an existing sibling set (records with their own
// timestamps, tombstones, expiries and dots, as a backup holds them) to
// every replica of its key at level l, hinting the replicas that miss it,
// like a client write but without stamping a new version: replicas merge
// it, so applying an entry older than what they hold changes nothing.
func (c *Coordinator) ApplyEntry(ctx context.Context, e *kvv1.Entry, l Level) (WriteResult, error) {
	p, err := c.place(e.Key, l)
	if err != nil {
		return WriteResult{}, err
	}
	return c.replicate(ctx, e, p, false)
}

// placement is where one write goes and how many acks it needs.
type placement struct {
	cur, targets []string
	need, alive  int
}

func (c *Coordinator) place(key []byte, l Level) (placement, error) {
	cur, pend := c.topo.Placement(ring.Token(key))
	if len(cur) == 0 {
		return placement{}, fmt.Errorf("%w: the ring has no members", ErrUnavailable)
	}
	p := placement{cur: cur, targets: append(slices.Clone(cur), pend...)}
	// During a move the pending owner must ack too, so the quorum still
	// intersects once ownership flips (W + pending, as Cassandra does).
	p.need = l.Required(len(cur)) + len(pend)
	for _, t := range p.targets {
		if c.topo.Alive(t) {
			p.alive++
		}
	}
	if p.alive < p.need {
		return placement{}, fmt.Errorf("%w: %d of %d replicas alive, %s needs %d", ErrUnavailable, p.alive, len(p.targets), l, p.need)
	}
	return p, nil
}

// replicate sends entry to p's targets and waits for p.need acks; with
// dotted, one live current replica first issues the dot and merges
// (vector-clock keyspaces), and the others get its merged set.
func (c *Coordinator) replicate(ctx context.Context, entry *kvv1.Entry, p placement, dotted bool) (WriteResult, error) {
	cur, targets, need, alive := p.cur, p.targets, p.need, p.alive
	acks, skip := 0, ""
	if dotted {
		// One replica issues the dot and merges; its whole sibling set is
		// what the others receive (see kvv1.ApplyRequest.assign_dots).
		for _, t := range cur {
			if c.topo.Alive(t) && (skip == "" || t == c.cfg.NodeID) {
				skip = t
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
		merged, err := c.tr.ApplyDotted(cctx, skip, entry)
		cancel()
		if err != nil {
			return WriteResult{}, fmt.Errorf("%w: coordinating replica %s: %w", ErrTimeout, skip, err)
		}
		entry, acks = merged, 1
		alive--
	}
	results := make(chan error, len(targets))
	for _, t := range targets {
		if t == skip {
			continue
		}
		if !c.topo.Alive(t) {
			c.hint(t, entry)
			continue
		}
		// Not ctx: the fan-out outlives the client request (a late replica
		// still gets the write, or a hint) but not the node, so it runs
		// under c.bg, which WithoutCancel(ctx) could not express.
		go func() { //nolint:contextcheck // deliberately c.bg (the node's lifetime), not the request's ctx; see above
			cctx, cancel := context.WithTimeout(c.bg, c.cfg.WriteTimeout)
			err := c.tr.Apply(cctx, t, []*kvv1.Entry{entry})
			cancel()
			if err != nil && t != c.cfg.NodeID {
				c.hint(t, entry)
			}
			results <- err
		}()
	}
	timer := time.NewTimer(c.cfg.WriteTimeout)
	defer timer.Stop()
	failed, outstanding := 0, alive
	for acks < need {
		if acks+outstanding < need {
			return WriteResult{}, fmt.Errorf("%w: %d of %d acks (%d failed)", ErrTimeout, acks, need, failed)
		}
		select {
		case err := <-results:
			outstanding--
			if err == nil {
				acks++
			} else {
				failed++
			}
		case <-timer.C:
			return WriteResult{}, fmt.Errorf("%w: %d of %d acks after %s", ErrTimeout, acks, need, c.cfg.WriteTimeout)
		case <-ctx.Done():
			return WriteResult{}, fmt.Errorf("%w: %d of %d acks: %w", ErrTimeout, acks, need, ctx.Err())
		}
	}
	return WriteResult{Acks: acks, N: len(targets)}, nil
}

func (c *Coordinator) hint(target string, e *kvv1.Entry) {
	if c.hints == nil {
		return
	}
	if err := c.hints.Add(target, e); err != nil {
		c.cfg.Logger.Error("kvnode: storing hint", "target", target, "err", err)
		return
	}
	c.HintsWritten.Add(1)
}

// ReadResult is a successful read.
type ReadResult struct {
	// Records are the visible versions: one in LWW mode, one or more
	// siblings in vector-clock mode; empty when the key is absent.
	Records []*kvv1.Record
	// Context covers every version read, tombstones included (vector-clock
	// mode; nil otherwise).
	Context []*kvv1.VersionEntry
	Acks, N int
	// Repaired counts replicas fixed by read repair.
	Repaired int
}

// Found reports whether the key has a visible value.
func (r ReadResult) Found() bool { return len(r.Records) > 0 }

type readReply struct {
	node string
	full bool
	resp *kvv1.ReadResponse
	err  error
}

// Get reads key at level.
func (c *Coordinator) Get(ctx context.Context, key []byte, level Level) (res ReadResult, err error) {
	start := time.Now()
	defer func() { c.observe("get", level, start, err) }()
	cur, _ := c.topo.Placement(ring.Token(key))
	n := len(cur)
	if n == 0 {
		return ReadResult{}, fmt.Errorf("%w: the ring has no members", ErrUnavailable)
	}
	need := level.Required(n)
	var live []string
	for _, id := range cur {
		if c.topo.Alive(id) {
			live = append(live, id)
		}
	}
	if len(live) < need {
		return ReadResult{}, fmt.Errorf("%w: %d of %d replicas alive, %s needs %d", ErrUnavailable, len(live), n, level, need)
	}
	c.lat.sort(live)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()

	replies := make(chan readReply, 2*len(live))
	send := func(node string, full bool) {
		go func() {
			t0 := time.Now()
			r, err := c.tr.Read(ctx, node, key, !full)
			if err == nil {
				c.lat.observe(node, time.Since(t0))
			} else {
				// A replica that failed or was abandoned (the call ends when
				// the read does) ranks behind the ones that answered.
				c.lat.penalize(node, time.Since(t0))
			}
			replies <- readReply{node: node, full: full, resp: r, err: err}
		}()
	}
	next, inflight, fullInflight := 0, 0, 0
	for ; next < need; next++ {
		send(live[next], next == 0)
		inflight++
		if next == 0 {
			fullInflight++
		}
	}
	got := map[string]*kvv1.ReadResponse{}
	var data *kvv1.ReadResponse
	var dataNode string
	spec := time.NewTimer(c.lat.threshold(c.cfg.SpeculativeMin))
	defer spec.Stop()
	refetched := false
	for len(got) < need || data == nil {
		if inflight == 0 {
			if data == nil && len(got) > 0 && !refetched {
				refetched = true
				// Only digests arrived: ask one responder for the value.
				for id := range got {
					send(id, true)
					inflight++
					fullInflight++
					break
				}
				continue
			}
			return ReadResult{}, fmt.Errorf("%w: %d of %d replicas answered", ErrTimeout, len(got), need)
		}
		select {
		case r := <-replies:
			inflight--
			if r.full {
				fullInflight--
			}
			if r.err != nil {
				if next < len(live) {
					send(live[next], r.full || (data == nil && fullInflight == 0))
					if r.full || (data == nil && fullInflight == 0) {
						fullInflight++
					}
					next++
					inflight++
				}
				continue
			}
			if r.full && data == nil {
				data, dataNode = r.resp, r.node
			}
			if _, ok := got[r.node]; !ok || r.full {
				got[r.node] = r.resp
			}
		case <-spec.C:
			if next < len(live) {
				c.SpeculativeRuns.Add(1)
				full := data == nil
				send(live[next], full)
				if full {
					fullInflight++
				}
				next++
				inflight++
			}
		case <-ctx.Done():
			return ReadResult{}, fmt.Errorf("%w: %d of %d replicas answered", ErrTimeout, len(got), need)
		}
	}
	merged := data.GetSiblings().GetRecords()
	repaired := 0
	mismatch := false
	for _, r := range got {
		if !bytes.Equal(r.Digest, data.Digest) {
			mismatch = true
		}
	}
	if mismatch {
		merged, repaired, err = c.resolve(ctx, key, got, dataNode)
		if err != nil {
			return ReadResult{}, err
		}
	}
	now := c.cfg.Now()
	res = ReadResult{Records: record.Visible(merged, now), Acks: len(got), N: n, Repaired: repaired}
	if c.VectorClocks(key) {
		res.Context = record.JoinContext(merged)
	}
	return res, nil
}

// resolve fetches every responder's full set, merges them and writes the
// result back to each stale responder, waiting for those writes (blocking
// read repair: a later read can never see an older value than this one).
func (c *Coordinator) resolve(ctx context.Context, key []byte, got map[string]*kvv1.ReadResponse, dataNode string) ([]*kvv1.Record, int, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sets := map[string][]*kvv1.Record{}
	var fetchErr error
	for id, r := range got {
		if r.Siblings != nil || id == dataNode {
			mu.Lock()
			sets[id] = r.GetSiblings().GetRecords()
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			full, err := c.tr.Read(ctx, id, key, false)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fetchErr = err
				return
			}
			sets[id] = full.GetSiblings().GetRecords()
		}()
	}
	wg.Wait()
	if fetchErr != nil {
		return nil, 0, fmt.Errorf("%w: read repair fetch: %w", ErrTimeout, fetchErr)
	}
	var merged []*kvv1.Record
	for _, s := range sets {
		merged = record.Merge(merged, s)
	}
	want := record.Digest(merged)
	entry := &kvv1.Entry{Key: key, Siblings: &kvv1.Siblings{Records: merged}}
	var repairErr error
	repaired := 0
	for id, s := range sets {
		if bytes.Equal(record.Digest(s), want) {
			continue
		}
		repaired++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.tr.Apply(ctx, id, []*kvv1.Entry{entry}); err != nil {
				mu.Lock()
				repairErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.ReadRepairs.Add(int64(repaired))
	if repairErr != nil {
		return nil, 0, fmt.Errorf("%w: read repair: %w", ErrTimeout, repairErr)
	}
	return merged, repaired, nil
}

// BatchResult is one key of a batch get.
type BatchResult struct {
	Key    []byte
	Result ReadResult
	Err    error
}

// ErrBatchTooLarge is returned for batches over MaxBatch keys.
var ErrBatchTooLarge = errors.New("kvnode: batch too large")

// BatchGet reads keys concurrently (at most 16 at a time).
func (c *Coordinator) BatchGet(ctx context.Context, keys [][]byte, level Level) ([]BatchResult, error) {
	if len(keys) > c.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: %d keys, at most %d", ErrBatchTooLarge, len(keys), c.cfg.MaxBatch)
	}
	out := make([]BatchResult, len(keys))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := c.Get(ctx, k, level)
			out[i] = BatchResult{Key: k, Result: r, Err: err}
		}()
	}
	wg.Wait()
	return out, nil
}

// MaxBatch is the batch-get cap.
func (c *Coordinator) MaxBatch() int { return c.cfg.MaxBatch }
