package antientropy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/portico-io/portico/kvnode/record"
	"github.com/portico-io/portico/kvnode/ring"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Defaults for Config.
const (
	DefaultInterval = time.Hour
	DefaultGrace    = 10 * 24 * time.Hour
	scanPage        = 512
)

// Peers reaches the other replicas.
type Peers interface {
	Tree(ctx context.Context, node string, req *kvv1.TreeRequest) (*kvv1.TreeResponse, error)
	Scan(ctx context.Context, node string, req *kvv1.ScanRequest) (*kvv1.ScanResponse, error)
	Apply(ctx context.Context, node string, entries []*kvv1.Entry) error
}

// Topology gives the serving ring and liveness.
type Topology interface {
	Rings() (current, future *ring.Ring)
	Alive(id string) bool
}

// Config configures New. Zero values take the defaults.
type Config struct {
	Self string
	// Depth of each range's tree (default 8: 256 leaves).
	Depth uint
	// Interval between full passes (default 1h; must be well under Grace).
	Interval time.Duration
	// Grace is the tombstone grace period (default 10 days): tombstones
	// older than this are purged and never streamed.
	Grace time.Duration
	// RangeTimeout bounds the repair of one range with one peer (default 1m).
	RangeTimeout time.Duration
	Now          func() time.Time
	Logger       *slog.Logger
	// OnPass, when set, is called after every periodic pass (test signal).
	OnPass func(Result)
}

// Result summarises one repair pass.
type Result struct {
	Ranges   int       `json:"ranges"`
	Repaired int       `json:"rangesRepaired"`
	Failed   int       `json:"rangesFailed"`
	Pulled   int       `json:"keysPulled"`
	Pushed   int       `json:"keysPushed"`
	Purged   int       `json:"tombstonesPurged"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Errors   []string  `json:"errors,omitempty"`
}

// RangeStatus is the repair state of one range.
type RangeStatus struct {
	Start        uint64    `json:"start"`
	End          uint64    `json:"end"`
	LastRepaired time.Time `json:"lastRepaired"`
}

// Repairer is safe for concurrent use; passes are serialised.
type Repairer struct {
	cfg   Config
	st    *storage.Store
	peers Peers
	topo  Topology

	pass     sync.Mutex // one pass at a time
	mu       sync.Mutex
	last     map[[2]uint64]time.Time
	lastFull time.Time
	lastRes  Result
}

// New returns a repairer for the local store.
func New(cfg Config, st *storage.Store, peers Peers, topo Topology) *Repairer {
	if cfg.Depth == 0 {
		cfg.Depth = DefaultDepth
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.RangeTimeout <= 0 {
		cfg.RangeTimeout = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Repairer{cfg: cfg, st: st, peers: peers, topo: topo, last: map[[2]uint64]time.Time{}}
}

// GCBefore is the purge horizon at now.
func (r *Repairer) GCBefore() time.Time { return r.cfg.Now().Add(-r.cfg.Grace) }

// Depth is the configured tree depth.
func (r *Repairer) Depth() uint { return r.cfg.Depth }

// Run repairs every Interval until ctx ends.
func (r *Repairer) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res := r.RepairAll(ctx)
		if len(res.Errors) > 0 && ctx.Err() == nil {
			r.cfg.Logger.Warn("kvnode: anti-entropy pass incomplete", "failed", res.Failed, "first", res.Errors[0])
		}
		if r.cfg.OnPass != nil {
			r.cfg.OnPass(res)
		}
	}
}

// RepairAll repairs every range this node replicates with every other
// alive replica, then purges tombstones past the grace period if every
// range was repaired. Each range's local tree is built once, and each peer
// is asked for the trees of all the ranges it shares in one call.
func (r *Repairer) RepairAll(ctx context.Context) Result {
	r.pass.Lock()
	defer r.pass.Unlock()
	cur, _ := r.topo.Rings()
	res := Result{Started: r.cfg.Now()}
	gc := r.GCBefore()
	ranges := cur.RangesOf(r.cfg.Self)
	failed := make([]bool, len(ranges))
	mine := make([][][]byte, len(ranges))
	byPeer := map[string][]int{}
	for i, rg := range ranges {
		res.Ranges++
		for _, peer := range rg.Replicas {
			if peer == r.cfg.Self {
				continue
			}
			if !r.topo.Alive(peer) {
				failed[i] = true
				res.Errors = append(res.Errors, fmt.Sprintf("range (%d,%d]: replica %s is down", rg.Start, rg.End, peer))
				continue
			}
			byPeer[peer] = append(byPeer[peer], i)
		}
	}
	peers := make([]string, 0, len(byPeer))
	for p := range byPeer {
		peers = append(peers, p)
	}
	slices.Sort(peers)
	for _, peer := range peers {
		idx := byPeer[peer]
		req := &kvv1.TreeRequest{Depth: uint32(r.cfg.Depth), GcBeforeUnixMs: gc.UnixMilli()}
		for _, i := range idx {
			req.Ranges = append(req.Ranges, &kvv1.TokenRange{Start: ranges[i].Start, End: ranges[i].End})
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.RangeTimeout)
		theirs, err := r.peers.Tree(cctx, peer, req)
		cancel()
		if err == nil && len(theirs.Trees) != len(idx) {
			err = fmt.Errorf("%d trees for %d ranges", len(theirs.Trees), len(idx))
		}
		if err != nil {
			for _, i := range idx {
				failed[i] = true
			}
			res.Errors = append(res.Errors, fmt.Sprintf("trees from %s: %v", peer, err))
			continue
		}
		for k, i := range idx {
			if mine[i] == nil {
				if mine[i], err = BuildTree(r.st, ranges[i], r.cfg.Depth, gc); err != nil {
					failed[i] = true
					res.Errors = append(res.Errors, err.Error())
					continue
				}
			}
			pulled, pushed, err := r.repairLeaves(ctx, ranges[i], peer, mine[i], theirs.Trees[k].Nodes, gc)
			res.Pulled += pulled
			res.Pushed += pushed
			if err != nil {
				failed[i] = true
				res.Errors = append(res.Errors, fmt.Sprintf("range (%d,%d] with %s: %v", ranges[i].Start, ranges[i].End, peer, err))
			}
			if pulled > 0 {
				mine[i] = nil // rebuilt for the next peer
			}
		}
	}
	for i, rg := range ranges {
		if failed[i] {
			res.Failed++
			continue
		}
		res.Repaired++
		r.mu.Lock()
		r.last[[2]uint64{rg.Start, rg.End}] = r.cfg.Now()
		r.mu.Unlock()
	}
	if res.Failed == 0 && ctx.Err() == nil {
		// Every replica agreed on every range just now, so no replica still
		// holds a value that a tombstone past its grace would have to cover.
		n, err := r.st.Purge(gc)
		res.Purged = n
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
		}
		r.mu.Lock()
		r.lastFull = res.Started
		r.mu.Unlock()
	}
	res.Finished = r.cfg.Now()
	r.mu.Lock()
	r.lastRes = res
	r.mu.Unlock()
	return res
}

// RepairRange compares one range with one peer and exchanges the keys of
// differing leaves both ways.
func (r *Repairer) RepairRange(ctx context.Context, rg ring.Range, peer string) (pulled, pushed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RangeTimeout)
	defer cancel()
	gc := r.GCBefore()
	mine, err := BuildTree(r.st, rg, r.cfg.Depth, gc)
	if err != nil {
		return 0, 0, err
	}
	theirs, err := r.peers.Tree(ctx, peer, &kvv1.TreeRequest{Ranges: []*kvv1.TokenRange{{Start: rg.Start, End: rg.End}}, Depth: uint32(r.cfg.Depth), GcBeforeUnixMs: gc.UnixMilli()})
	if err != nil {
		return 0, 0, fmt.Errorf("tree: %w", err)
	}
	if len(theirs.Trees) != 1 {
		return 0, 0, fmt.Errorf("tree: %d trees for 1 range", len(theirs.Trees))
	}
	return r.repairLeaves(ctx, rg, peer, mine, theirs.Trees[0].Nodes, gc)
}

// RepairRanges is RepairRange for several ranges with one peer: one tree
// request for all of them, then the keys of differing leaves exchanged
// both ways, range by range. It stops at the first failure.
func (r *Repairer) RepairRanges(ctx context.Context, ranges []ring.Range, peer string) (pulled, pushed int, err error) {
	if len(ranges) == 0 {
		return 0, 0, nil
	}
	gc := r.GCBefore()
	req := &kvv1.TreeRequest{Depth: uint32(r.cfg.Depth), GcBeforeUnixMs: gc.UnixMilli()}
	for _, rg := range ranges {
		req.Ranges = append(req.Ranges, &kvv1.TokenRange{Start: rg.Start, End: rg.End})
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RangeTimeout)
	theirs, err := r.peers.Tree(cctx, peer, req)
	cancel()
	if err == nil && len(theirs.Trees) != len(ranges) {
		err = fmt.Errorf("%d trees for %d ranges", len(theirs.Trees), len(ranges))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("trees: %w", err)
	}
	for i, rg := range ranges {
		mine, err := BuildTree(r.st, rg, r.cfg.Depth, gc)
		if err != nil {
			return pulled, pushed, err
		}
		pl, ps, err := r.repairLeaves(ctx, rg, peer, mine, theirs.Trees[i].Nodes, gc)
		pulled += pl
		pushed += ps
		if err != nil {
			return pulled, pushed, fmt.Errorf("range (%d,%d]: %w", rg.Start, rg.End, err)
		}
	}
	return pulled, pushed, nil
}

func (r *Repairer) repairLeaves(ctx context.Context, rg ring.Range, peer string, mine, theirs [][]byte, gc time.Time) (pulled, pushed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RangeTimeout)
	defer cancel()
	for _, leaf := range DiffLeaves(mine, theirs, r.cfg.Depth) {
		lr, ok := LeafRange(rg, r.cfg.Depth, leaf)
		if !ok {
			continue
		}
		pl, ps, err := r.exchange(ctx, lr, peer, gc)
		pulled += pl
		pushed += ps
		if err != nil {
			return pulled, pushed, err
		}
	}
	return pulled, pushed, nil
}

// exchange merges one leaf's keys: the peer's into the local store, and the
// local ones the peer lacks or holds stale into the peer.
func (r *Repairer) exchange(ctx context.Context, lr ring.Range, peer string, gc time.Time) (pulled, pushed int, err error) {
	remote := map[string][]*kvv1.Record{}
	if err := Pull(ctx, r.peers, peer, lr, gc, func(e *kvv1.Entry) error {
		remote[string(e.Key)] = e.GetSiblings().GetRecords()
		return nil
	}); err != nil {
		return 0, 0, err
	}
	var push []*kvv1.Entry
	local := map[string]bool{}
	err = r.st.Scan(lr, nil, gc, func(e storage.Entry) bool {
		local[string(e.Key)] = true
		theirs, ok := remote[string(e.Key)]
		if !ok || !record.Equal(record.Merge(theirs, e.Records), theirs) {
			push = append(push, &kvv1.Entry{Key: e.Key, Siblings: &kvv1.Siblings{Records: e.Records}})
		}
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	keys := make([]string, 0, len(remote))
	for k := range remote {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cur, err := r.st.Get([]byte(k))
		if err != nil {
			return pulled, 0, err
		}
		if local[k] && record.Equal(record.Merge(cur, remote[k]), cur) {
			continue
		}
		if _, err := r.st.Apply([]byte(k), remote[k]); err != nil {
			return pulled, 0, err
		}
		pulled++
	}
	for len(push) > 0 {
		n := min(len(push), scanPage)
		if err := r.peers.Apply(ctx, peer, push[:n]); err != nil {
			return pulled, pushed, fmt.Errorf("push: %w", err)
		}
		pushed += n
		push = push[n:]
	}
	return pulled, pushed, nil
}

// Pull streams every entry of rg from peer, page by page, into fn.
func Pull(ctx context.Context, peers Peers, peer string, rg ring.Range, gc time.Time, fn func(*kvv1.Entry) error) error {
	var after []byte
	for {
		resp, err := peers.Scan(ctx, peer, &kvv1.ScanRequest{
			Range: &kvv1.TokenRange{Start: rg.Start, End: rg.End}, After: after, Limit: scanPage, GcBeforeUnixMs: gc.UnixMilli(),
		})
		if err != nil {
			return fmt.Errorf("scan %s: %w", peer, err)
		}
		for _, e := range resp.Entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(resp.Next) == 0 {
			return nil
		}
		after = resp.Next
	}
}

// ServeScan answers one ScanRequest page from st.
func ServeScan(st *storage.Store, req *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	limit := int(req.Limit)
	if limit <= 0 || limit > 4096 {
		limit = scanPage
	}
	rg := ring.Range{Start: req.GetRange().GetStart(), End: req.GetRange().GetEnd()}
	resp := &kvv1.ScanResponse{}
	var lastKey []byte
	err := st.Scan(rg, req.After, time.UnixMilli(req.GcBeforeUnixMs), func(e storage.Entry) bool {
		if len(resp.Entries) == limit {
			resp.Next = lastKey
			return false
		}
		resp.Entries = append(resp.Entries, &kvv1.Entry{Key: e.Key, Siblings: &kvv1.Siblings{Records: e.Records}})
		lastKey = e.StorageKey
		return true
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ServeTree answers a TreeRequest from st.
func ServeTree(st *storage.Store, req *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	if req.Depth == 0 || req.Depth > 16 {
		return nil, errors.New("antientropy: tree depth must be 1..16")
	}
	resp := &kvv1.TreeResponse{}
	for _, tr := range req.Ranges {
		nodes, err := BuildTree(st, ring.Range{Start: tr.Start, End: tr.End}, uint(req.Depth), time.UnixMilli(req.GcBeforeUnixMs))
		if err != nil {
			return nil, err
		}
		resp.Trees = append(resp.Trees, &kvv1.Tree{Nodes: nodes})
	}
	return resp, nil
}

// Status returns per-range last repair times, the last full pass and the
// last result.
func (r *Repairer) Status() (ranges []RangeStatus, lastFull time.Time, last Result) {
	cur, _ := r.topo.Rings()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range cur.RangesOf(r.cfg.Self) {
		ranges = append(ranges, RangeStatus{Start: rg.Start, End: rg.End, LastRepaired: r.last[[2]uint64{rg.Start, rg.End}]})
	}
	return ranges, r.lastFull, r.lastRes
}

// OldestRange is the oldest last-repair time over the ranges this node
// replicates (zero if any range was never repaired).
func (r *Repairer) OldestRange() time.Time {
	ranges, _, _ := r.Status()
	var oldest time.Time
	for i, s := range ranges {
		if i == 0 || s.LastRepaired.Before(oldest) {
			oldest = s.LastRepaired
		}
	}
	return oldest
}
