package xds

import (
	"maps"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	xdsstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// Delta xDS accounting.
//
// go-control-plane sends a delta stream nothing for a type none of whose
// resources changed, so a node never ACKs such a type at a new version. The
// server keeps, per delta stream and type, what the node holds: the
// resources and versions of its last ACKed state (deltaType). When a node
// gets a new snapshot, and when it ACKs, a type whose resources at the
// node's snapshot equal what it holds is recorded at that snapshot's version
// (nodes.Tracker.AckUnchanged): the node has exactly that content. A type
// that changed waits for the node's real ACK or NACK.
//
// go-control-plane also counts a response as held by the node from the
// moment it is sent, ACKed or not: after a NACK it would diff the next
// snapshot against the rejected state, so a resource the node rejected and
// the next version keeps would never be sent again and the node would ACK a
// version it does not hold. After a NACK the server therefore hands the cache
// what it knows the node holds as the base (nackedSub) once a different
// version is set: the node's last ACKed state, with every resource the
// rejected response named marked unknown (deltaType.nack). The next version
// then resends those resources and whatever else differs — and is NACKed
// again if it keeps what was rejected, as with state of the world.

// deltaType is a delta stream's state for one type.
type deltaType struct {
	// sub mirrors the subscription go-control-plane keeps for the stream
	// (same constructor, same updates, legacy wildcard on as in New), except
	// that its returned resources are what the node holds: they change when
	// the node ACKs, not when a response is sent.
	sub xdsstream.Subscription
	// nacked is the version of the response the node last NACKed while no
	// response has followed; "" otherwise.
	nacked string
	// current says the node holds exactly its connection's snapshot's
	// resources of the type (conn.snap; wildcard subscriptions only), so
	// the next snapshot needs comparing with that one only (sameLocked).
	current bool
}

// held is the node's state of the type: resource name → version.
func (d *deltaType) held() map[string]string { return d.sub.ReturnedResources() }

// request applies a request's subscription changes, as go-control-plane does
// to its own copy.
func (d *deltaType) request(req *discovery.DeltaDiscoveryRequest) {
	if len(req.GetResourceNamesSubscribe())+len(req.GetResourceNamesUnsubscribe()) > 0 {
		d.current = false
	}
	d.sub.UpdateResourceSubscriptions(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
}

func newDeltaType(req *discovery.DeltaDiscoveryRequest) *deltaType {
	// The initial versions are the node's claim of what it holds (from an
	// earlier stream): go-control-plane diffs the first response against
	// them, and so does the accounting. Cloned: go-control-plane mutates
	// the request's map.
	initial := maps.Clone(req.GetInitialResourceVersions())
	return &deltaType{sub: xdsstream.NewDeltaSubscription(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), initial, true)}
}

// nack records that the node rejected l. A client may have applied part
// of a rejected response (Envoy keeps the valid resources of one) or none
// of it (Portico's clients): what it holds of every resource l named is
// unknown from here, which the empty version says, so the next response
// sends each of them again (or its removal) and no version counts as
// unchanged while one of them is in it.
func (d *deltaType) nack(l sent) {
	d.nacked, d.current = l.version, false
	held := d.held()
	for name := range l.changed {
		held[name] = ""
	}
	for _, name := range l.removed {
		held[name] = ""
	}
}

// ack merges the response the node ACKed into what it holds.
func (d *deltaType) ack(l sent) {
	held := d.held()
	for name, v := range l.changed {
		held[name] = v
	}
	for _, name := range l.removed {
		delete(held, name)
	}
}

// holds reports whether a node holding held under sub has every resource of
// versions (a snapshot's version map of one type) it subscribes to, at that
// version, and nothing else of it: delta xDS has nothing to send it. It is
// the test go-control-plane's createDeltaResponse makes, with no allocation.
func holds(sub cache.Subscription, held, versions map[string]string) bool {
	if sub.IsWildcard() {
		if len(held) != len(versions) {
			return false
		}
		for name, v := range versions {
			if h, ok := held[name]; !ok || h != v {
				return false
			}
		}
		return true
	}
	for name := range sub.SubscribedResources() {
		v, exists := versions[name]
		h, had := held[name]
		if exists && (!had || h != v) || !exists && had {
			return false
		}
	}
	return true
}

// sameKey names a comparison of two snapshots' resources of one type.
type sameKey struct {
	a, b    cache.ResourceSnapshot
	typeURL string
}

// sameVersions reports whether two version maps are equal.
func sameVersions(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for name, v := range a {
		if w, ok := b[name]; !ok || w != v {
			return false
		}
	}
	return true
}

// changes lists what a delta response sends: resource name → version, and
// the names it removes.
func changes(resp *discovery.DeltaDiscoveryResponse) (map[string]string, []string) {
	changed := make(map[string]string, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		changed[r.GetName()] = r.GetVersion()
	}
	return changed, resp.GetRemovedResources()
}

// nackedSub is the subscription handed to the cache for a delta watch of a
// type whose last response the node NACKed. Until a version other than the
// rejected one is set for the node it reports go-control-plane's own state
// (the rejected response counted as returned), so the rejected version is
// not sent again; once armed it reports what the node really holds, so the
// next version is diffed against that.
type nackedSub struct {
	cache.Subscription
	typeURL, version string
	held             map[string]string // a copy: the stream's mutates
	armed            atomic.Bool
}

func (n *nackedSub) ReturnedResources() map[string]string {
	if n.armed.Load() {
		return n.held
	}
	return n.Subscription.ReturnedResources()
}

// deltaNacks hands nackedSubs from the server's request callback to the
// cache's CreateDeltaWatch (go-control-plane calls one right after the
// other, with the same request) and arms them when a node's snapshot
// changes. A leaf lock: nothing is called while mu is held.
type deltaNacks struct {
	mu sync.Mutex
	// pending: requests on their way from OnStreamDeltaRequest to
	// CreateDeltaWatch.
	pending map[*discovery.DeltaDiscoveryRequest]*nackedSub
	// open: by node id, the watches open with a nackedSub.
	open map[string]map[*nackedSub]struct{}
}

func newDeltaNacks() *deltaNacks {
	return &deltaNacks{pending: map[*discovery.DeltaDiscoveryRequest]*nackedSub{}, open: map[string]map[*nackedSub]struct{}{}}
}

func (d *deltaNacks) expect(req *discovery.DeltaDiscoveryRequest, n *nackedSub) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[req] = n
}

// forget drops a pending request that never reached CreateDeltaWatch.
func (d *deltaNacks) forget(req *discovery.DeltaDiscoveryRequest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, req)
}

// take returns and registers req's nackedSub (nil when it has none).
func (d *deltaNacks) take(req *discovery.DeltaDiscoveryRequest, node string) *nackedSub {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.pending[req]
	if !ok {
		return nil
	}
	delete(d.pending, req)
	if d.open[node] == nil {
		d.open[node] = map[*nackedSub]struct{}{}
	}
	d.open[node][n] = struct{}{}
	return n
}

func (d *deltaNacks) close(node string, n *nackedSub) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.open[node], n)
	if len(d.open[node]) == 0 {
		delete(d.open, node)
	}
}

// arm arms node's nackedSubs whose type snap serves at a version other than
// the rejected one. Call it before the cache is given snap.
func (d *deltaNacks) arm(node string, snap cache.ResourceSnapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := range d.open[node] {
		if snap.GetVersion(n.typeURL) != n.version {
			n.armed.Store(true)
		}
	}
}

// CreateDeltaWatch opens a delta watch, with the node's real state as the
// base after a NACK (nackedSub).
func (c *nackSuppressor) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	node := req.GetNode().GetId()
	n := c.nacks.take(req, node)
	if n == nil {
		return c.SnapshotCache.CreateDeltaWatch(req, sub, ch)
	}
	n.Subscription = sub
	// Registered (take) before this check, so a snapshot set from here on
	// arms it too.
	if cur, err := c.SnapshotCache.GetSnapshot(node); err == nil && cur.GetVersion(n.typeURL) != n.version {
		n.armed.Store(true)
	}
	cancel, err := c.SnapshotCache.CreateDeltaWatch(req, n, ch)
	if cancel == nil {
		c.nacks.close(node, n)
		return nil, err
	}
	return func() { c.nacks.close(node, n); cancel() }, err
}
