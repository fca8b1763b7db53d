// Package reshard changes a cache cluster's membership and slot ownership
// through its topology store (package topology), the way cachectl does it:
// add or remove a node, move slots, rebalance. Every change is a new map
// published with compare-and-set and a higher epoch; the nodes learn it by
// watching, and the publisher waits for the nodes concerned to report an
// epoch before the next step, so clients never bounce between two nodes
// that disagree (see cluster.Importing for the four steps of a move).
//
// A move interrupted (the tool killed, the store unavailable) leaves its
// migrations in the stored map; running the same move again resumes each
// slot from the state it reached.
package reshard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/cachenode/topology"
)

// Nodes asks cache nodes, by RESP address, what the publisher waits on.
type Nodes interface {
	// Epoch is the epoch of the map the node serves.
	Epoch(ctx context.Context, addr string) (uint64, error)
	// Moves is the node's CACHE MIGRATIONS.
	Moves(ctx context.Context, addr string) ([]cluster.MoveStatus, error)
}

// Resharder publishes membership and ownership changes.
type Resharder struct {
	Client *topology.Client
	Nodes  Nodes
	// Batch is how many slots move through the steps together (default
	// 16); their keys are still copied one slot at a time.
	Batch int
	// Pause is a wait between batches (a crude rate limit on top of the
	// nodes' own copy rate).
	Pause time.Duration
	// StepTimeout bounds each wait for nodes (default 60 s).
	StepTimeout time.Duration
	// Log receives one line per step (nil: discarded).
	Log io.Writer
}

func (r *Resharder) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
}

// ErrUsage: the request cannot apply to the stored map (nothing changed).
var ErrUsage = errors.New("reshard")

// publish reads the stored map, lets edit change its spec (edit returns
// false when there is nothing to do) and publishes it with epoch + 1,
// compare-and-set on the revision read; on a conflict it starts over.
func (r *Resharder) publish(ctx context.Context, what string, edit func(m *cluster.Map, s *cluster.Spec) (bool, error)) (*cluster.Map, error) {
	for attempt := 0; ; attempt++ {
		t, err := r.load(ctx)
		if err != nil {
			return nil, err
		}
		m, err := t.Spec.Map(t.Spec.Nodes[0].ID)
		if err != nil {
			return nil, err
		}
		s := m.Spec()
		changed, err := edit(m, &s)
		if err != nil {
			return nil, err
		}
		if !changed {
			return m, nil
		}
		s.Epoch = t.Spec.Epoch + 1
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("%s: the edited map is invalid: %w", what, err)
		}
		_, err = r.Client.Publish(ctx, s, t.Revision)
		if errors.Is(err, topology.ErrConflict) && attempt < 20 {
			continue
		}
		if errors.Is(err, topology.ErrUnavailable) {
			// No leader (an election) or no answer: whether the write
			// happened is unknown, so start over from a read, which finds
			// the edit done (nothing to change) or not.
			if err := r.retryWait(ctx, what, err); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		r.logf("epoch %d: %s", s.Epoch, what)
		return s.Map(s.Nodes[0].ID)
	}
}

// load reads the stored map, retrying while the store is unavailable
// (a Raft election) for up to the step timeout.
func (r *Resharder) load(ctx context.Context) (*topology.Topology, error) {
	deadline := time.Now().Add(r.stepTimeout())
	for {
		t, err := r.Client.Load(ctx)
		if !errors.Is(err, topology.ErrUnavailable) || time.Now().After(deadline) {
			return t, err
		}
		if err := r.retryWait(ctx, "read the map", err); err != nil {
			return nil, err
		}
	}
}

// retryWait logs why and waits a little before a retry.
func (r *Resharder) retryWait(ctx context.Context, what string, err error) error {
	r.logf("%s: %v; retrying", what, err)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

func (r *Resharder) stepTimeout() time.Duration {
	if r.StepTimeout > 0 {
		return r.StepTimeout
	}
	return 60 * time.Second
}

// waitEpoch waits until every node reports at least epoch.
func (r *Resharder) waitEpoch(ctx context.Context, epoch uint64, nodes ...*cluster.Node) error {
	ctx, cancel := context.WithTimeout(ctx, r.stepTimeout())
	defer cancel()
	for _, n := range nodes {
		for {
			e, err := r.Nodes.Epoch(ctx, n.Addr())
			if err == nil && e >= epoch {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("node %s did not reach epoch %d (last: %d, %v)", n.ID, epoch, e, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// waitEmptied waits until the source reports every slot done.
func (r *Resharder) waitEmptied(ctx context.Context, src *cluster.Node, want []int) error {
	ctx, cancel := context.WithTimeout(ctx, r.stepTimeout())
	defer cancel()
	pending := map[int]bool{}
	for _, s := range want {
		pending[s] = true
	}
	var last string
	for len(pending) > 0 {
		st, err := r.Nodes.Moves(ctx, src.Addr())
		if err == nil {
			for _, s := range st {
				if s.Done {
					delete(pending, s.Slot)
				} else if s.Err != "" {
					last = fmt.Sprintf("slot %d: %s", s.Slot, s.Err)
				}
			}
		} else {
			last = err.Error()
		}
		if len(pending) == 0 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node %s did not empty %d slots (last: %s)", src.ID, len(pending), last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Move moves slots to the primary to, a batch at a time; slots it already
// owns are skipped, slots mid-move resume.
func (r *Resharder) Move(ctx context.Context, slotList []int, to string) error {
	batch := r.Batch
	if batch <= 0 {
		batch = 16
	}
	for len(slotList) > 0 {
		n := min(batch, len(slotList))
		if err := r.moveBatch(ctx, slotList[:n], to); err != nil {
			return err
		}
		slotList = slotList[n:]
		if r.Pause > 0 && len(slotList) > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(r.Pause):
			}
		}
	}
	return nil
}

// moveBatch takes slots (owned by any primaries) through importing,
// migrating, handoff and done, grouped by their source.
func (r *Resharder) moveBatch(ctx context.Context, batch []int, to string) error {
	t, err := r.load(ctx)
	if err != nil {
		return err
	}
	m, err := t.Spec.Map(t.Spec.Nodes[0].ID)
	if err != nil {
		return err
	}
	dst := m.Node(to)
	if dst == nil || dst.IsReplica() {
		return fmt.Errorf("%w: %q is not a primary of the cluster", ErrUsage, to)
	}
	bySource := map[string][]int{}
	for _, s := range batch {
		if s < 0 || s >= slots.N {
			return fmt.Errorf("%w: no slot %d", ErrUsage, s)
		}
		if mg := m.Migration(s); mg != nil {
			if m.Nodes[mg.To].ID != to {
				return fmt.Errorf("%w: slot %d is moving to %s already", ErrUsage, s, m.Nodes[mg.To].ID)
			}
			bySource[m.Nodes[mg.From].ID] = append(bySource[m.Nodes[mg.From].ID], s)
			continue
		}
		o := m.Owner(s)
		if o == nil {
			return fmt.Errorf("%w: slot %d has no owner (assign it with topology set)", ErrUsage, s)
		}
		if o.ID != to {
			bySource[o.ID] = append(bySource[o.ID], s)
		}
	}
	sources := make([]string, 0, len(bySource))
	for id := range bySource {
		sources = append(sources, id)
	}
	sort.Strings(sources)
	for _, from := range sources {
		if err := r.moveFrom(ctx, bySource[from], from, to); err != nil {
			return err
		}
	}
	return nil
}

func (r *Resharder) moveFrom(ctx context.Context, group []int, from, to string) error {
	desc := fmt.Sprintf("slots %s from %s to %s", Ranges(group), from, to)
	// A state is the farthest any of the group's slots reached; each step
	// below only advances slots that are behind it.
	// finish, when given, runs after the group's edits of each attempt.
	step := func(state string, edit func(m *cluster.Map, s *cluster.Spec, slot int) bool, finish ...func(m *cluster.Map, s *cluster.Spec)) (*cluster.Map, error) {
		return r.publish(ctx, desc+": "+state, func(m *cluster.Map, s *cluster.Spec) (bool, error) {
			changed := false
			for _, slot := range group {
				if edit(m, s, slot) {
					changed = true
				}
			}
			for _, f := range finish {
				f(m, s)
			}
			return changed, nil
		})
	}
	find := func(s *cluster.Spec, slot int) int {
		for i, mg := range s.Migrations {
			if mg.Slot == slot {
				return i
			}
		}
		return -1
	}
	// 1. importing: the target accepts ASKING for the slots.
	m, err := step(cluster.Importing, func(m *cluster.Map, s *cluster.Spec, slot int) bool {
		if find(s, slot) >= 0 || m.Owner(slot).ID == to {
			return false
		}
		s.Migrations = append(s.Migrations, cluster.MigrationSpec{Slot: slot, From: from, To: to, State: cluster.Importing})
		return true
	})
	if err != nil {
		return err
	}
	if err := r.waitEpoch(ctx, m.Epoch, m.Node(to)); err != nil {
		return err
	}
	// 2. migrating: the source redirects missing keys and copies.
	m, err = step(cluster.Migrating, func(m *cluster.Map, s *cluster.Spec, slot int) bool {
		if i := find(s, slot); i >= 0 && s.Migrations[i].State == cluster.Importing {
			s.Migrations[i].State = cluster.Migrating
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	var copying []int
	for _, slot := range group {
		if mg := m.Migration(slot); mg != nil && mg.State == cluster.Migrating {
			copying = append(copying, slot)
		}
	}
	if err := r.waitEpoch(ctx, m.Epoch, m.Node(from)); err != nil {
		return err
	}
	if err := r.waitEmptied(ctx, m.Node(from), copying); err != nil {
		return err
	}
	// 3. handoff: the target owns the slots; the source answers ASK.
	var handed []int
	m, err = step(cluster.Handoff, func(m *cluster.Map, s *cluster.Spec, slot int) bool {
		i := find(s, slot)
		if i < 0 || s.Migrations[i].State != cluster.Migrating {
			return false
		}
		s.Migrations[i].State = cluster.Handoff
		handed = append(handed, slot)
		return true
	}, func(m *cluster.Map, s *cluster.Spec) {
		// Once per attempt, not per slot: a rewrite of the slot lists
		// walks every slot (16384), and per slot a batch of 256 took
		// seconds under the race detector.
		if len(handed) > 0 {
			setOwners(s, m, handed, to)
			handed = handed[:0]
		}
	})
	if err != nil {
		return err
	}
	if err := r.waitEpoch(ctx, m.Epoch, m.Node(from), m.Node(to)); err != nil {
		return err
	}
	// 4. done: the source answers MOVED.
	m, err = step("done", func(m *cluster.Map, s *cluster.Spec, slot int) bool {
		if i := find(s, slot); i >= 0 && s.Migrations[i].State == cluster.Handoff {
			s.Migrations = append(s.Migrations[:i], s.Migrations[i+1:]...)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	return r.waitEpoch(ctx, m.Epoch, m.Node(from), m.Node(to))
}

// setOwner rewrites the spec's slot lists so slot belongs to id.
func setOwner(s *cluster.Spec, m *cluster.Map, slot int, id string) {
	setOwners(s, m, []int{slot}, id)
}

// setOwners rewrites the spec's slot lists so every slot of slots belongs
// to id.
func setOwners(s *cluster.Spec, m *cluster.Map, slots []int, id string) {
	owners := m.Owners()
	for _, mg := range s.Migrations { // ownership already changed in s
		if mg.State == cluster.Handoff {
			owners[mg.Slot] = mg.To
		}
	}
	for _, slot := range slots {
		owners[slot] = id
	}
	byNode := map[string][]int{}
	for sl, o := range owners {
		if o != "" {
			byNode[o] = append(byNode[o], sl)
		}
	}
	for i := range s.Nodes {
		s.Nodes[i].Slots = rangeStrings(byNode[s.Nodes[i].ID])
	}
}

func rangeStrings(sorted []int) []string {
	var out []string
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if i == j {
			out = append(out, strconv.Itoa(sorted[i]))
		} else {
			out = append(out, strconv.Itoa(sorted[i])+"-"+strconv.Itoa(sorted[j]))
		}
		i = j + 1
	}
	return out
}

// Ranges formats slots as "0-99,200".
func Ranges(slotList []int) string {
	s := append([]int(nil), slotList...)
	sort.Ints(s)
	return strings.Join(rangeStrings(s), ",")
}

// ParseSlots parses "0-99,200,300-310".
func ParseSlots(spec string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, "-")
		if !ok {
			b = a
		}
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || lo < 0 || hi >= slots.N || lo > hi {
			return nil, fmt.Errorf("%w: bad slot range %q", ErrUsage, part)
		}
		for s := lo; s <= hi; s++ {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no slots given", ErrUsage)
	}
	return out, nil
}

// Move is one planned slot move.
type Move struct {
	Slot     int
	From, To string
}

// Plan is the fewest slot moves that leave every primary not in exclude
// with an equal share (±1) of the slots, and the excluded ones with none.
// Slots leave the most loaded nodes first, highest slots first, so each
// node keeps contiguous ranges where it can.
func Plan(m *cluster.Map, exclude ...string) ([]Move, error) {
	ex := map[string]bool{}
	for _, id := range exclude {
		if n := m.Node(id); n == nil {
			return nil, fmt.Errorf("%w: no node %q", ErrUsage, id)
		}
		ex[id] = true
	}
	var targets []string
	owned := map[string][]int{}
	for i := range m.Nodes {
		n := &m.Nodes[i]
		if n.IsReplica() || n.Failed {
			continue
		}
		if !ex[n.ID] {
			targets = append(targets, n.ID)
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: no primary left to own slots", ErrUsage)
	}
	for s, o := range m.Owners() {
		if o != "" {
			owned[o] = append(owned[o], s)
		}
	}
	total := m.Assigned
	want := map[string]int{}
	sort.Strings(targets)
	for i, id := range targets {
		want[id] = total / len(targets)
		if i < total%len(targets) {
			want[id]++
		}
	}
	// Donors give up their surplus (everything, if excluded).
	var pool []Move
	ids := make([]string, 0, len(owned))
	for id := range owned {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		surplus := len(owned[id]) - want[id]
		for i := 0; i < surplus; i++ {
			s := owned[id][len(owned[id])-1-i]
			pool = append(pool, Move{Slot: s, From: id})
		}
	}
	sort.Slice(pool, func(i, j int) bool { return pool[i].Slot < pool[j].Slot })
	var out []Move
	for _, id := range targets {
		need := want[id] - len(owned[id])
		for ; need > 0 && len(pool) > 0; need-- {
			mv := pool[0]
			pool = pool[1:]
			mv.To = id
			out = append(out, mv)
		}
	}
	return out, nil
}

// Rebalance moves slots as Plan says, grouped by target.
func (r *Resharder) Rebalance(ctx context.Context, exclude ...string) (int, error) {
	t, err := r.load(ctx)
	if err != nil {
		return 0, err
	}
	m, err := t.Spec.Map(t.Spec.Nodes[0].ID)
	if err != nil {
		return 0, err
	}
	plan, err := Plan(m, exclude...)
	if err != nil {
		return 0, err
	}
	byTarget := map[string][]int{}
	var order []string
	for _, mv := range plan {
		if byTarget[mv.To] == nil {
			order = append(order, mv.To)
		}
		byTarget[mv.To] = append(byTarget[mv.To], mv.Slot)
	}
	for _, to := range order {
		r.logf("moving %d slots to %s", len(byTarget[to]), to)
		if err := r.Move(ctx, byTarget[to], to); err != nil {
			return 0, err
		}
	}
	return len(plan), nil
}

// AddNode adds a node without slots (a primary, or a replica of
// replicaOf).
func (r *Resharder) AddNode(ctx context.Context, n cluster.NodeSpec) (*cluster.Map, error) {
	if len(n.Slots) > 0 {
		return nil, fmt.Errorf("%w: a new node starts without slots; move some to it", ErrUsage)
	}
	return r.publish(ctx, "add node "+n.ID, func(m *cluster.Map, s *cluster.Spec) (bool, error) {
		if m.Node(n.ID) != nil {
			return false, fmt.Errorf("%w: node %q is already a member", ErrUsage, n.ID)
		}
		s.Nodes = append(s.Nodes, n)
		return true, nil
	})
}

// RemoveNode removes a node that owns no slots and has no replicas.
func (r *Resharder) RemoveNode(ctx context.Context, id string) (*cluster.Map, error) {
	return r.publish(ctx, "remove node "+id, func(m *cluster.Map, s *cluster.Spec) (bool, error) {
		n := m.Node(id)
		switch {
		case n == nil:
			return false, fmt.Errorf("%w: no node %q", ErrUsage, id)
		case len(n.Ranges) > 0:
			return false, fmt.Errorf("%w: node %s owns slots %v; rebalance --exclude %s first", ErrUsage, id, n.Ranges, id)
		case len(n.Replicas) > 0:
			return false, fmt.Errorf("%w: node %s has replicas; remove or re-point them first", ErrUsage, id)
		}
		for _, mg := range m.Migrations {
			if mg.From == m.Index(n) || mg.To == m.Index(n) {
				return false, fmt.Errorf("%w: slot %d is moving to or from %s", ErrUsage, mg.Slot, id)
			}
		}
		for i := range s.Nodes {
			if s.Nodes[i].ID == id {
				s.Nodes = append(s.Nodes[:i], s.Nodes[i+1:]...)
				break
			}
		}
		return true, nil
	})
}

// RESP asks nodes over RESP with go-redis, one short-lived client per call
// (the publisher's calls are few).
type RESP struct {
	// Username and Password authenticate (AUTH) when the nodes require it.
	Username, Password string
	// TLS, when set, is used to reach nodes whose RESP port speaks TLS
	// (every node started with certificate files): a cache node passes
	// tlsfiles.Files.ClientConfig with a policy admitting cachenode, a tool
	// its own workload's, or a config trusting the platform CA.
	TLS *tls.Config
}

func (n RESP) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Username: n.Username, Password: n.Password, Protocol: 2, TLSConfig: n.TLS,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1, PoolSize: 1})
}

// Epoch reads cluster_my_epoch from CLUSTER INFO.
func (n RESP) Epoch(ctx context.Context, addr string) (uint64, error) {
	c := n.client(addr)
	defer c.Close()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_my_epoch:"); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, errors.New("CLUSTER INFO without cluster_my_epoch")
}

// Moves runs CACHE MIGRATIONS.
func (n RESP) Moves(ctx context.Context, addr string) ([]cluster.MoveStatus, error) {
	c := n.client(addr)
	defer c.Close()
	v, err := c.Do(ctx, "CACHE", "MIGRATIONS").Slice()
	if err != nil {
		return nil, err
	}
	var out []cluster.MoveStatus
	for _, e := range v {
		f, ok := e.([]any)
		if !ok || len(f) != 6 {
			return nil, fmt.Errorf("CACHE MIGRATIONS: unexpected entry %v", e)
		}
		slot, _ := f[0].(int64)
		to, _ := f[1].(string)
		epoch, _ := f[2].(int64)
		moved, _ := f[3].(int64)
		done, _ := f[4].(int64)
		msg, _ := f[5].(string)
		out = append(out, cluster.MoveStatus{Slot: int(slot), To: to, Epoch: uint64(epoch), Moved: moved, Done: done == 1, Err: msg})
	}
	return out, nil
}

// Initial is a first map for nodes: the first len(nodes)/(1+replicas)
// own equal shares of the slots (±1, in order), and each of the others
// replicates one of them in turn. Slots and replica_of in nodes are
// ignored.
func Initial(nodes []cluster.NodeSpec, replicas int) (cluster.Spec, error) {
	if replicas < 0 || len(nodes) == 0 || len(nodes)%(1+replicas) != 0 {
		return cluster.Spec{}, fmt.Errorf("%w: %d nodes cannot be primaries with %d replicas each", ErrUsage, len(nodes), replicas)
	}
	primaries := len(nodes) / (1 + replicas)
	s := cluster.Spec{Epoch: 1}
	start := 0
	for i, n := range nodes {
		n.Slots, n.ReplicaOf = nil, ""
		if i < primaries {
			size := slots.N / primaries
			if i < slots.N%primaries {
				size++
			}
			n.Slots = []string{strconv.Itoa(start) + "-" + strconv.Itoa(start+size-1)}
			start += size
		} else {
			n.ReplicaOf = nodes[(i-primaries)%primaries].ID
		}
		s.Nodes = append(s.Nodes, n)
	}
	return s, s.Validate()
}

// Init publishes Initial(nodes, replicas) unless a map is stored already;
// it reports whether it published. Safe to run from every installer at
// once: the publication is create-only.
func Init(ctx context.Context, c *topology.Client, nodes []cluster.NodeSpec, replicas int) (bool, error) {
	spec, err := Initial(nodes, replicas)
	if err != nil {
		return false, err
	}
	r := &Resharder{Client: c}
	for {
		_, err := r.load(ctx)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, topology.ErrNotFound) {
			return false, err
		}
		_, err = c.Publish(ctx, spec, 0)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, topology.ErrConflict):
			return false, nil // another installer won
		case errors.Is(err, topology.ErrUnavailable):
			if err := r.retryWait(ctx, "publish the first map", err); err != nil {
				return false, err
			}
		default:
			return false, err
		}
	}
}
