// Package xds serves compiled snapshots to every xDS client (Envoy, grpc-go
// proxyless clients, extauthz, ratelimitsvc) over ADS and the per-type
// services, state of the world and delta, on top of go-control-plane.
//
// It adds what go-control-plane leaves out:
//   - per node and type, the last ACKed and NACKed version (nodes.Tracker);
//   - NACK suppression: a version a node rejected is not sent to it again
//     (go-control-plane's snapshot cache answers a NACK with the same
//     version at once, looping thousands of times a second); the node keeps
//     its last good config until a different version is published;
//   - delta accounting: on a delta stream a type whose resources a new
//     version leaves as the node holds them is recorded at that version
//     without a response (go-control-plane sends none), and after a NACK
//     the next version is diffed against what the node holds, not against
//     what it rejected (delta.go);
//   - a Policy choosing each node's snapshot, so rollouts can hold some
//     node groups on an older version;
//   - stream failures: a stream that ends before the node answered a
//     response (one larger than the node can receive, or than this server
//     may send) is recorded in the tracker, which lists a node failing that
//     way repeatedly as failing (nodes.StateFailing).
package xds

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfigservice "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/xdscontract"
)

// DefaultMaxMsgBytes bounds one xDS message either way unless
// Config.MaxMsgBytes says otherwise: it equals the receive limit of
// Portico's own clients (xdsclient.DefaultMaxRecvMsgBytes), since a
// state-of-the-world response, and the first delta response of a stream,
// carry every resource of a type at once.
const DefaultMaxMsgBytes = 256 << 20

// GroupMetadataKey is the node metadata field naming a node's rollout group.
const GroupMetadataKey = xdscontract.GroupMetadataKey

// Policy chooses the snapshot a node is served. latest is the newest
// published snapshot; returning nil serves latest.
type Policy interface {
	SnapshotFor(node nodes.Status, latest cache.ResourceSnapshot) cache.ResourceSnapshot
}

// Config configures a Server. Zero values take defaults.
type Config struct {
	// RequireIdentity makes every stream present a verified workload
	// identity (the gRPC server's TLS credentials verify it); the identity's
	// role picks what the node receives and which node clusters it may
	// claim. Without it (a plaintext debugging mode) the role is taken from
	// the node's own claims, which anyone can make.
	RequireIdentity bool
	// Tracker records node state; a new one is made when nil.
	Tracker *nodes.Tracker
	// Registerer receives the xDS metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// MaxMsgBytes is the gRPC server's send and receive limit (default
	// DefaultMaxMsgBytes), named in the node view when a response over it
	// could not be sent.
	MaxMsgBytes int
}

// Server is an xDS server. Create it with New, register it on a gRPC server
// with Register, and feed it with Publish.
type Server struct {
	maxMsgBytes     int
	requireIdentity bool
	log             *slog.Logger
	tracker         *nodes.Tracker
	cache           *nackSuppressor
	xds             serverv3.Server
	m               *metrics

	mu      sync.Mutex
	latest  cache.ResourceSnapshot
	policy  Policy
	conns   map[string]*conn // node id → connection info
	streams map[int64]*stream
	// same memoizes sameLocked during a retarget pass (nil otherwise).
	same map[sameKey]bool
}

type conn struct {
	cluster, group string
	streams        int
	// view is what the node receives; identity, when verified, owns the
	// node id while any of its streams is open.
	view     compile.View
	identity string
	// snap is the snapshot the node was last given (nil before).
	snap cache.ResourceSnapshot
	// delta holds the node's identified delta streams.
	delta map[int64]*stream
}

// Viewer is implemented by snapshots with a view per kind of client
// (compile.Snapshot). A snapshot without views is served whole.
type Viewer interface {
	View(compile.View) cache.ResourceSnapshot
}

// Encoder is implemented by snapshots that hold their resources encoded
// (compile.Snapshot): Encoded is what the go-control-plane cache is given,
// so each resource is marshalled once per snapshot rather than once per
// stream and response. It serves the same versions and bytes.
type Encoder interface {
	Encoded() cache.ResourceSnapshot
}

// reservedClusters are the node clusters only one role may claim.
var reservedClusters = map[string]identity.Role{
	NodeClusterGateway:   identity.Gateway,
	NodeClusterExtAuthz:  identity.ExtAuthz,
	NodeClusterRateLimit: identity.RateLimit,
}

// Node clusters of ARCHITECTURE.md.
const (
	NodeClusterGateway   = xdscontract.NodeClusterGateway
	NodeClusterExtAuthz  = xdscontract.NodeClusterExtAuthz
	NodeClusterRateLimit = xdscontract.NodeClusterRateLimit
)

// viewOf returns the view of a verified role.
func viewOf(r identity.Role) compile.View {
	switch r {
	case identity.Gateway:
		return compile.ViewGateway
	case identity.ExtAuthz:
		return compile.ViewExtAuthz
	case identity.RateLimit:
		return compile.ViewRateLimit
	default:
		return compile.ViewRouting
	}
}

// claimedView is the view of an unverified node, from what it says it is.
func claimedView(node *core.Node) compile.View {
	switch {
	case node.GetCluster() == NodeClusterExtAuthz:
		return compile.ViewExtAuthz
	case node.GetCluster() == NodeClusterRateLimit:
		return compile.ViewRateLimit
	case node.GetUserAgentName() == "envoy":
		return compile.ViewGateway
	default:
		return compile.ViewRouting
	}
}

// stream remembers, per type, the nonce and version of the last response,
// so a request can be matched to the response it answers.
type stream struct {
	nodeID string
	// id is the verified identity of the stream's peer (zero without one).
	id   identity.ID
	last map[string]sent
	// typeURL is the type of a per-type service's stream (requests may
	// omit it); resource.AnyType on ADS.
	typeURL string
	// delta is set on delta streams: per type, what the node holds.
	delta map[string]*deltaType
	// pending is a request handed to deltaNacks and not yet taken.
	pending *discovery.DeltaDiscoveryRequest
}

// sent is the last response of one type on a stream: its nonce, version
// and size, and whether the node has answered it (ACK or NACK).
type sent struct {
	nonce, version string
	bytes          int
	answered       bool
	// changed and removed are what a delta response sent: resource name →
	// version, and the names it removed.
	changed map[string]string
	removed []string
}

// New returns a Server with no snapshot: clients wait until Publish.
func New(ctx context.Context, cfg Config) *Server {
	if cfg.Tracker == nil {
		cfg.Tracker = nodes.NewTracker()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMsgBytes <= 0 {
		cfg.MaxMsgBytes = DefaultMaxMsgBytes
	}
	s := &Server{
		maxMsgBytes:     cfg.MaxMsgBytes,
		requireIdentity: cfg.RequireIdentity,
		log:             cfg.Logger,
		tracker:         cfg.Tracker,
		m:               newMetrics(cfg.Registerer),
		conns:           map[string]*conn{},
		streams:         map[int64]*stream{},
	}
	s.cache = &nackSuppressor{
		nacks: newDeltaNacks(),
		// ads=false: in ADS mode the cache answers a request naming resources
		// only if it names every resource of that type in the snapshot, which
		// holds for Envoy but never for proxyless gRPC clients (they ask for
		// their one listener). Envoy warms clusters and listeners until their
		// EDS/RDS dependencies arrive, so it does not need the ordering.
		SnapshotCache: cache.NewSnapshotCache(false, cache.IDHash{}, cacheLogger{cfg.Logger}),
		tracker:       cfg.Tracker,
	}
	s.xds = serverv3.NewServer(ctx, s.cache, s)
	return s
}

// Tracker returns the node tracker the server feeds.
func (s *Server) Tracker() *nodes.Tracker { return s.tracker }

// Register adds ADS and the per-type discovery services to g.
func (s *Server) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	secretservice.RegisterSecretDiscoveryServiceServer(g, s.xds)
	rlsconfigservice.RegisterRateLimitConfigDiscoveryServiceServer(g, s.xds)
}

// Publish makes snap the latest snapshot and re-targets every connected
// node. snap must be immutable from here on.
func (s *Server) Publish(ctx context.Context, snap cache.ResourceSnapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latest = snap
	s.m.version.Set(versionNumber(snap))
	return s.retargetLocked(ctx)
}

// Latest returns the latest published snapshot, or nil.
func (s *Server) Latest() cache.ResourceSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest
}

// SetPolicy replaces the targeting policy (nil = everyone gets latest) and
// re-targets every connected node.
func (s *Server) SetPolicy(ctx context.Context, p Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
	return s.retargetLocked(ctx)
}

// Retarget re-evaluates the policy for every connected node; a policy whose
// decisions changed (a rollout's next wave) calls it.
func (s *Server) Retarget(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retargetLocked(ctx)
}

func (s *Server) retargetLocked(ctx context.Context) error {
	// Dropped after the pass: it holds snapshots.
	s.same = map[sameKey]bool{}
	defer func() { s.same = nil }()
	for id := range s.conns {
		if err := s.targetLocked(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// targetLocked sets node id's snapshot from the policy. A node's snapshot is
// only ever replaced by a different version, so clients see no churn. The
// node's delta streams then count every type left as they hold it at the
// new version.
func (s *Server) targetLocked(ctx context.Context, id string) error {
	if s.latest == nil {
		return nil
	}
	snap := s.latest
	c := s.conns[id]
	// The security channel follows the head: no rollout holds it back.
	if s.policy != nil && (c == nil || !c.view.SecurityChannel()) {
		st, ok := s.tracker.Get(id)
		if !ok {
			st = nodes.Status{ID: id, Cluster: c.cluster, Group: c.group}
		}
		if p := s.policy.SnapshotFor(st, s.latest); p != nil {
			snap = p
		}
	}
	if v, ok := snap.(Viewer); ok {
		view := compile.ViewRouting
		if c != nil {
			view = c.view
		}
		snap = v.View(view)
	}
	// The cache gets the encoded form; everything else here (c.snap, the
	// delta accounting) keeps the compiled messages.
	wire := snap
	if e, ok := snap.(Encoder); ok {
		wire = e.Encoded()
	}
	if cur, err := s.cache.GetSnapshot(id); err == nil && cur == wire {
		return nil
	}
	// Built before the cache sees the snapshot, which may build it on
	// another goroutine otherwise (compile.Snapshot builds its own at
	// compile time: a no-op then).
	if err := wire.ConstructVersionMap(); err != nil {
		return fmt.Errorf("xds: version map for %s: %w", id, err)
	}
	s.cache.nacks.arm(id, wire)
	if err := s.cache.SetSnapshot(ctx, id, wire); err != nil {
		return fmt.Errorf("xds: set snapshot for %s: %w", id, err)
	}
	if c != nil {
		prev := c.snap
		c.snap = snap
		s.deltaTargetLocked(id, c, prev, snap)
	}
	return nil
}

// deltaTargetLocked records, on node id's delta streams, every type whose
// resources at snap are what the node holds at that version (delta xDS
// sends nothing for it). A type with a response in flight waits for its
// answer. A type the node held exactly at prev (deltaType.current) costs
// one comparison of prev and snap per retarget pass, whatever the number
// of nodes sharing them.
func (s *Server) deltaTargetLocked(id string, c *conn, prev, snap cache.ResourceSnapshot) {
	for _, st := range c.delta {
		for typeURL, d := range st.delta {
			if l, ok := st.last[typeURL]; !ok || !l.answered {
				d.current = false
				continue
			}
			if !d.current || prev == nil {
				s.unchangedLocked(id, typeURL, d, snap)
				continue
			}
			if d.current = s.sameLocked(prev, snap, typeURL); d.current {
				s.ackUnchangedLocked(id, typeURL, snap)
			}
		}
	}
}

// unchangedLocked records node id at snap's version of typeURL when what
// the node holds (d, with no response of the type in flight) is what snap
// has, and notes whether d is then current.
func (s *Server) unchangedLocked(id, typeURL string, d *deltaType, snap cache.ResourceSnapshot) {
	ok := snap.GetVersion(typeURL) != "" && holds(&d.sub, d.held(), snap.GetVersionMap(typeURL))
	d.current = ok && d.sub.IsWildcard()
	if ok {
		s.ackUnchangedLocked(id, typeURL, snap)
	}
}

func (s *Server) ackUnchangedLocked(id, typeURL string, snap cache.ResourceSnapshot) {
	if s.tracker.AckUnchanged(id, typeURL, snap.GetVersion(typeURL)) {
		s.m.unchanged.WithLabelValues(shortType(typeURL)).Inc()
	}
}

// sameLocked reports whether a and b serve the same resources of typeURL,
// at the same versions; within a retarget pass each pair is compared once.
func (s *Server) sameLocked(a, b cache.ResourceSnapshot, typeURL string) bool {
	if a.GetVersion(typeURL) == "" || b.GetVersion(typeURL) == "" {
		return false
	}
	k := sameKey{a, b, typeURL}
	if same, ok := s.same[k]; ok {
		return same
	}
	same := sameVersions(a.GetVersionMap(typeURL), b.GetVersionMap(typeURL))
	if s.same != nil {
		s.same[k] = same
	}
	return same
}

// identify records the stream's node on its first request and gives the
// node a snapshot before go-control-plane opens its first watch. With
// RequireIdentity it refuses a node that claims a cluster reserved for
// another role, or a node id another identity holds.
func (s *Server) identify(id int64, node *core.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[id]
	if !ok || st.nodeID != "" || node.GetId() == "" {
		return nil
	}
	view := claimedView(node)
	who := ""
	if s.requireIdentity {
		if role, reserved := reservedClusters[node.GetCluster()]; reserved && role != st.id.Role {
			s.m.refused.WithLabelValues("cluster").Inc()
			s.log.Warn("xds: node refused: cluster reserved for another role", "node", node.GetId(), "cluster", node.GetCluster(), "identity", st.id.String())
			return status.Errorf(codes.PermissionDenied, "node cluster %q is reserved for role %s; this client is %s", node.GetCluster(), role, st.id)
		}
		if c, ok := s.conns[node.GetId()]; ok && c.identity != st.id.String() {
			s.m.refused.WithLabelValues("node_id").Inc()
			s.log.Warn("xds: node refused: node id held by another identity", "node", node.GetId(), "identity", st.id.String(), "holder", c.identity)
			return status.Errorf(codes.PermissionDenied, "node id %q is connected as another identity", node.GetId())
		}
		view, who = viewOf(st.id.Role), st.id.String()
	}
	st.nodeID = node.GetId()
	group := nodes.DefaultGroup
	if v, ok := node.GetMetadata().GetFields()[GroupMetadataKey]; ok && v.GetStringValue() != "" {
		group = v.GetStringValue()
	}
	c, ok := s.conns[st.nodeID]
	if !ok {
		c = &conn{}
		s.conns[st.nodeID] = c
		s.m.nodes.Inc()
	}
	c.cluster, c.group, c.view, c.identity = node.GetCluster(), group, view, who
	c.streams++
	if st.delta != nil {
		if c.delta == nil {
			c.delta = map[int64]*stream{}
		}
		c.delta[id] = st
	}
	s.tracker.Connect(st.nodeID, c.cluster, c.group, who, view.SecurityChannel())
	if err := s.targetLocked(context.Background(), st.nodeID); err != nil {
		s.log.Error("xds: cannot target node", "node", st.nodeID, "err", err)
	}
	s.log.Info("xds: node connected", "node", st.nodeID, "cluster", c.cluster, "group", group, "identity", who, "stream", id)
	return nil
}

func (s *Server) closeStream(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[id]
	if !ok {
		return
	}
	delete(s.streams, id)
	s.m.streams.Dec()
	if st.pending != nil {
		s.cache.nacks.forget(st.pending)
	}
	if st.nodeID == "" {
		return
	}
	if types, msg := unanswered(st.last, s.maxMsgBytes); len(types) > 0 {
		s.m.streamFailures.Inc()
		s.tracker.StreamFailed(st.nodeID, types, msg)
		s.log.Warn("xds: stream failed", "node", st.nodeID, "stream", id, "error", msg)
	}
	s.tracker.Disconnect(st.nodeID)
	c := s.conns[st.nodeID]
	c.streams--
	delete(c.delta, id)
	if c.streams <= 0 {
		delete(s.conns, st.nodeID)
		s.m.nodes.Dec()
		// Free the node's cache state; a reconnect is targeted afresh.
		s.cache.ClearSnapshot(st.nodeID)
		s.log.Info("xds: node disconnected", "node", st.nodeID)
	}
}

// openStream registers a stream of typeURL (resource.AnyType for ADS) and,
// with RequireIdentity, the verified identity of its peer; a peer without
// one is refused.
func (s *Server) openStream(ctx context.Context, id int64, typeURL string, delta bool) error {
	var who identity.ID
	if s.requireIdentity {
		var err error
		if who, err = identity.FromContext(ctx); err != nil {
			s.m.refused.WithLabelValues("identity").Inc()
			return status.Errorf(codes.Unauthenticated, "xds: %v", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &stream{id: who, last: map[string]sent{}, typeURL: typeURL}
	if delta {
		st.delta = map[string]*deltaType{}
	}
	s.streams[id] = st
	s.m.streams.Inc()
	return nil
}

// answer classifies a state-of-the-world request as the ACK or NACK of the
// response it names.
func (s *Server) answer(id int64, typeURL, nonce, version string, errMsg *string) {
	s.mu.Lock()
	st, ok := s.streams[id]
	if !ok {
		s.mu.Unlock()
		return
	}
	last, ok := answeredLocked(st, typeURL, nonce)
	node := st.nodeID
	s.mu.Unlock()
	if ok {
		s.record(node, typeURL, last.version, version, errMsg)
	}
}

// answeredLocked marks the response of typeURL that nonce names answered
// and returns it. Requests naming an older nonce (or none) are stale or
// new subscriptions and answer nothing, as go-control-plane treats them.
func answeredLocked(st *stream, typeURL, nonce string) (sent, bool) {
	if nonce == "" || st.nodeID == "" {
		return sent{}, false
	}
	last, ok := st.last[typeURL]
	if !ok || last.nonce != nonce {
		return sent{}, false
	}
	last.answered = true
	st.last[typeURL] = last
	return last, true
}

// record records node's answer to the response of typeURL at sentVersion:
// a NACK when errMsg is set, else an ACK of version (sentVersion if empty).
func (s *Server) record(node, typeURL, sentVersion, version string, errMsg *string) {
	short := shortType(typeURL)
	if errMsg != nil {
		s.m.nacks.WithLabelValues(short).Inc()
		s.tracker.Nack(node, typeURL, sentVersion, *errMsg)
		s.log.Warn("xds: NACK", "node", node, "type", short, "version", sentVersion, "error", *errMsg)
		return
	}
	s.m.acks.WithLabelValues(short).Inc()
	if version == "" {
		version = sentVersion
	}
	s.tracker.Ack(node, typeURL, version)
}

// deltaRequest follows a delta request: the subscription it changes, the
// ACK or NACK it carries (an ACK merges the response into what the node
// holds), and then whether the node holds its current snapshot of the type
// (a snapshot set while the response was in flight may leave nothing to
// send). After a NACK, until the next response, the request's watch is
// given what the node holds as its base (nackedSub). The tracker is written
// under s.mu so these records keep their order against targetLocked's.
func (s *Server) deltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[id]
	if !ok || st.nodeID == "" || st.delta == nil {
		return
	}
	if st.pending != nil {
		s.cache.nacks.forget(st.pending)
		st.pending = nil
	}
	typeURL := req.GetTypeUrl()
	if typeURL == "" && st.typeURL != resource.AnyType {
		typeURL = st.typeURL
	}
	d, ok := st.delta[typeURL]
	if ok {
		d.request(req)
	} else {
		d = newDeltaType(req)
		st.delta[typeURL] = d
	}
	var errMsg *string
	if e := req.GetErrorDetail(); e != nil {
		m := e.GetMessage()
		errMsg = &m
	}
	if last, ok := answeredLocked(st, typeURL, req.GetResponseNonce()); ok {
		if errMsg != nil {
			d.nack(last)
		} else {
			d.ack(last)
		}
		s.record(st.nodeID, typeURL, last.version, "", errMsg)
		// A version's content is the same wherever it is served (as state
		// of the world assumes too): a wildcard node that ACKed its
		// snapshot's version holds that snapshot's resources exactly.
		if c := s.conns[st.nodeID]; c != nil && c.snap != nil {
			if c.snap.GetVersion(typeURL) == last.version {
				d.current = errMsg == nil && d.sub.IsWildcard()
			} else {
				s.unchangedLocked(st.nodeID, typeURL, d, c.snap)
			}
		}
	}
	if d.nacked != "" {
		s.cache.nacks.expect(req, &nackedSub{typeURL: typeURL, version: d.nacked, held: maps.Clone(d.held())})
		st.pending = req
	}
}

// responded records a response of typeURL sent on stream id; changed and
// removed are what a delta response sends.
func (s *Server) responded(id int64, typeURL, nonce, version string, size int, changed map[string]string, removed []string) {
	s.mu.Lock()
	st, ok := s.streams[id]
	node := ""
	if ok {
		st.last[typeURL] = sent{nonce: nonce, version: version, bytes: size, changed: changed, removed: removed}
		if d := st.delta[typeURL]; d != nil {
			// The cache's base is the response's state again; what the
			// node holds is settled by its answer.
			d.nacked, d.current = "", false
		}
		node = st.nodeID
	}
	s.mu.Unlock()
	s.m.responses.WithLabelValues(shortType(typeURL)).Inc()
	if node != "" {
		s.tracker.Sent(node, typeURL, version)
	}
}

// Callbacks (serverv3.Callbacks).

var _ serverv3.Callbacks = (*Server)(nil)

func (s *Server) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return s.openStream(ctx, id, typeURL, false)
}

func (s *Server) OnStreamClosed(id int64, _ *core.Node) { s.closeStream(id) }

func (s *Server) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	if err := s.identify(id, req.GetNode()); err != nil {
		return err
	}
	var errMsg *string
	if d := req.GetErrorDetail(); d != nil {
		m := d.GetMessage()
		errMsg = &m
	}
	s.answer(id, req.GetTypeUrl(), req.GetResponseNonce(), req.GetVersionInfo(), errMsg)
	return nil
}

func (s *Server) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.responded(id, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo(), proto.Size(resp), nil, nil)
}

// go-control-plane numbers state-of-the-world and delta streams apart, both
// from 1: delta stream ids are negated here so the two never share an entry
// in s.streams.
func deltaID(id int64) int64 { return -id }

func (s *Server) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return s.openStream(ctx, deltaID(id), typeURL, true)
}

func (s *Server) OnDeltaStreamClosed(id int64, _ *core.Node) { s.closeStream(deltaID(id)) }

func (s *Server) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	id = deltaID(id)
	if err := s.identify(id, req.GetNode()); err != nil {
		return err
	}
	s.deltaRequest(id, req)
	return nil
}

func (s *Server) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	changed, removed := changes(resp)
	s.responded(deltaID(id), resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo(), proto.Size(resp), changed, removed)
}

func (s *Server) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error { return nil }

func (s *Server) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}

// nackSuppressor wraps the snapshot cache. On a NACK of the version the
// node is currently assigned, it opens the watch as if the client held that
// version, so the cache answers only when a different version is set.
//
// Delta watches are handled in delta.go: go-control-plane does not re-send
// a NACKed delta response, but it must diff the next one against what the
// node holds.
type nackSuppressor struct {
	cache.SnapshotCache
	tracker *nodes.Tracker
	nacks   *deltaNacks
}

func (c *nackSuppressor) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	if req.GetErrorDetail() != nil {
		if v, ok := c.tracker.NackedVersion(req.GetNode().GetId(), req.GetTypeUrl()); ok {
			r := proto.Clone(req).(*discovery.DiscoveryRequest)
			r.VersionInfo = v
			return c.SnapshotCache.CreateWatch(r, sub, ch)
		}
	}
	return c.SnapshotCache.CreateWatch(req, sub, ch)
}

// unanswered lists the types whose last response on a closing stream the
// node never answered, and describes them: the stream ended while they were
// in flight, or because they could not be sent or received.
func unanswered(last map[string]sent, maxMsgBytes int) (types []string, msg string) {
	var parts []string
	for typeURL, l := range last {
		if l.answered {
			continue
		}
		types = append(types, typeURL)
		p := fmt.Sprintf("%s version %s (%d bytes)", shortType(typeURL), l.version, l.bytes)
		if l.bytes > maxMsgBytes {
			p += fmt.Sprintf(": over the server's send limit of %d bytes", maxMsgBytes)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return nil, ""
	}
	sort.Strings(types)
	sort.Strings(parts)
	return types, "stream closed before the node answered " + strings.Join(parts, ", ") +
		"; a response over the node's receive limit ends its stream this way"
}

// shortType turns a type URL into a bounded metric label.
func shortType(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '/'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}

// cacheLogger adapts slog to go-control-plane's logger. go-control-plane
// logs at debug and info on every watch and response (with resource name
// lists), so a message is formatted only when its level is enabled.
type cacheLogger struct{ l *slog.Logger }

func (c cacheLogger) Debugf(f string, a ...any) { c.logf(slog.LevelDebug, f, a) }
func (c cacheLogger) Infof(f string, a ...any)  { c.logf(slog.LevelDebug, f, a) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.logf(slog.LevelWarn, f, a) }
func (c cacheLogger) Errorf(f string, a ...any) { c.logf(slog.LevelError, f, a) }

func (c cacheLogger) logf(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if c.l.Enabled(ctx, level) {
		c.l.Log(ctx, level, fmt.Sprintf(f, a...))
	}
}

// MaxMsgBytes is the send and receive limit the gRPC server carrying this
// xDS server must be given.
func (s *Server) MaxMsgBytes() int { return s.maxMsgBytes }
