package xdsclient

import (
	"context"
	"maps"
	"sort"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Protocols of Config.Protocol.
const (
	// ProtocolDelta (the default) is incremental xDS: a response carries
	// only the resources that changed and the names removed, so one
	// API-key change sends one ApiKeyShard instead of all of them. A type
	// none of whose resources changed gets no response; the control plane
	// records it at the new version all the same (it knows the client
	// holds exactly that content), so the node view and rollouts see every
	// type current.
	ProtocolDelta = "delta"
	// ProtocolSotW is state of the world: every resource of a type in each
	// response, and a response per type for every new version.
	ProtocolSotW = "sotw"
)

// deltaSession runs one incremental (DeltaAggregatedResources) stream.
//
// The client keeps, per type, the resources of the last state the applier
// accepted with their versions (c.delta); each response is merged into a
// copy of it and the whole merged state goes to Apply, so the ApplyFunc
// contract (the full state of one type) is the same for both protocols. A
// rejected merge is NACKed and the copy dropped. A resubscription reports
// the resources held (initial_resource_versions), so the server sends only
// what changed meanwhile and names what was removed. After a restart the
// map is empty: the first response of each type then carries every
// resource and replaces the persisted state.
func (c *client) deltaSession(ctx context.Context) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ads.DeltaAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	if h := c.cfg.Health; h != nil {
		grace := time.AfterFunc(h.syncGrace(), func() {
			if sctx.Err() == nil {
				h.inSync()
			}
		})
		defer grace.Stop()
	}
	for _, t := range c.cfg.Types {
		held := make(map[string]string, len(c.delta[t]))
		for name, r := range c.delta[t] {
			held[name] = r.GetVersion()
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: c.cfg.Node, TypeUrl: t, InitialResourceVersions: held}); err != nil {
			return false, err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, err
		}
		progressed = true
		c.cfg.Health.received(proto.Size(resp))
		t := resp.GetTypeUrl()
		version := resp.GetSystemVersionInfo()
		next := maps.Clone(c.delta[t])
		if next == nil {
			next = map[string]*discovery.Resource{}
		}
		for _, r := range resp.GetResources() {
			next[r.GetName()] = r
		}
		for _, name := range resp.GetRemovedResources() {
			delete(next, name)
		}
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
		if aerr := c.cfg.Apply(t, version, sortedResources(next)); aerr != nil {
			c.cfg.Logger.Warn("xds client: NACK", "type", t, "version", version, "err", aerr)
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: aerr.Error()}
			c.cfg.Health.rejected(t, version, aerr)
		} else {
			c.delta[t] = next
			c.acked[t] = version
			c.cfg.Health.applied(t)
		}
		if err := stream.Send(req); err != nil {
			return progressed, err
		}
	}
}

// sortedResources is the state's resources ordered by name, so the same
// state always reaches the applier (and its persisted copy) the same way.
func sortedResources(state map[string]*discovery.Resource) []*anypb.Any {
	names := make([]string, 0, len(state))
	for n := range state {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*anypb.Any, 0, len(names))
	for _, n := range names {
		out = append(out, state[n].GetResource())
	}
	return out
}
