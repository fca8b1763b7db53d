package compile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/portico-io/portico/internal/xdscontract"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
)

// Resource is one xDS resource.
type Resource = types.Resource

// Type URLs of everything a snapshot holds.
const (
	ClusterType         = resource.ClusterType
	EndpointType        = resource.EndpointType
	ListenerType        = resource.ListenerType
	RouteType           = resource.RouteType
	SecretType          = resource.SecretType
	RateLimitConfigType = resource.RateLimitConfigType
)

// Type URLs of Portico's own resources (the contract with its clients).
var (
	JwtProviderType    = xdscontract.JwtProviderType
	ApiKeyShardType    = xdscontract.ApiKeyShardType
	RevocationListType = xdscontract.RevocationListType
	RateLimitRuleType  = xdscontract.RateLimitRuleType
)

// TypeURLs lists every type a snapshot serves, Envoy types first in the
// order ADS wants them (CDS, EDS, LDS, RDS, SDS). Read-only.
var TypeURLs = []string{
	ClusterType, EndpointType, ListenerType, RouteType, SecretType, RateLimitConfigType,
	JwtProviderType, ApiKeyShardType, RevocationListType, RateLimitRuleType,
}

// Compile-time checks that the Portico messages carry the name
// go-control-plane indexes them by.
var (
	_ types.ResourceWithName = (*authv1.JwtProvider)(nil)
	_ types.ResourceWithName = (*authv1.ApiKeyShard)(nil)
	_ types.ResourceWithName = (*authv1.RevocationList)(nil)
	_ types.ResourceWithName = (*ratelimitv1.RateLimitRule)(nil)
)

// Snapshot is an immutable set of resources compiled from one config
// version. It implements go-control-plane's cache.ResourceSnapshot (so it
// can be handed to a SnapshotCache as is) for the Envoy types and for
// Portico's own types, which cache.Snapshot cannot hold.
//
// A Snapshot is safe for concurrent use. The maps and messages it returns
// are shared: callers MUST NOT modify them.
type Snapshot struct {
	version    string
	items      map[string]map[string]types.ResourceWithTTL
	versionMap map[string]map[string]string
	envoy      *cache.Snapshot
	// wire holds items' resources as encoded ones (encoded.go), and
	// encoded serves them to go-control-plane's cache.
	wire    map[string]map[string]types.ResourceWithTTL
	encoded *encodedSnapshot
	// views holds what each kind of client may receive (View). Every view
	// shares the same array, so View on a view returns the same values.
	views *[numViews]*Snapshot
}

// View is what one kind of xDS client may receive. The xDS server picks it
// from the role of the client's verified identity, so a client gets only
// the types its role consumes: a process holding an extauthz certificate
// receives no TLS key, and a gateway no API-key hash.
type View int

const (
	// ViewGateway is Envoy's: listeners (without the API listeners meant
	// for proxyless clients, which Envoy would warn about on every push),
	// routes, clusters, endpoints, and only the SDS secrets those
	// listeners and clusters reference.
	ViewGateway View = iota
	// ViewRouting is a proxyless gRPC client's: listeners, routes,
	// clusters and endpoints; no secrets, no policy.
	ViewRouting
	// ViewExtAuthz is extauthz's: JWT providers, API-key shards and
	// revocation lists.
	ViewExtAuthz
	// ViewRateLimit is ratelimitsvc's: the rate-limit rules in both forms.
	ViewRateLimit
	numViews
)

// SecurityChannel reports whether v's clients are on the security channel:
// they always receive the latest published version, whatever a rollout or
// the deployment pins other nodes to. That is extauthz's view: JWT
// providers, API-key shards and revocation lists are credentials and
// trust anchors, and a revoked token, a deleted key or a rotated provider
// key must be in force everywhere within seconds, not after a wave bakes.
// The price is that these kinds skip canarying: they are checked at
// publish (compile) and a client that rejects one NACKs it and keeps its
// previous state. Gateways' TLS secrets follow the waves: a certificate
// change can break a listener like any other config change.
func (v View) SecurityChannel() bool { return v == ViewExtAuthz }

// viewTypes lists the types each view holds; every other type is served
// empty (subscribing to it yields an empty answer, not the resources).
var viewTypes = [numViews][]string{
	ViewGateway:   {ClusterType, EndpointType, ListenerType, RouteType, SecretType},
	ViewRouting:   {ClusterType, EndpointType, ListenerType, RouteType},
	ViewExtAuthz:  {JwtProviderType, ApiKeyShardType, RevocationListType},
	ViewRateLimit: {RateLimitConfigType, RateLimitRuleType},
}

var _ cache.ResourceSnapshot = (*Snapshot)(nil)

type validator interface{ ValidateAll() error }

// newSnapshot indexes res by name, validates every resource, checks
// consistency and precomputes the delta version map, so that the snapshot is
// never written to after it is returned.
func newSnapshot(version string, res map[string][]Resource) (*Snapshot, error) {
	return newSnapshotKnown(version, res, nil, nil)
}

// checked is a resource validated and hashed already: by an earlier
// compile that produced the very same message, or assembled from checked
// parts (vhosts.go). wire is its encoding when known (nil: encoded on
// first use).
type checked struct {
	hash string
	wire []byte
}

// newSnapshotKnown is newSnapshot for resources some of which are checked
// already: known maps them to their hash (and encoding), and they are
// neither validated nor marshalled again.
func newSnapshotKnown(version string, res map[string][]Resource, known map[Resource]checked, sds *sdsMemo) (*Snapshot, error) {
	s := &Snapshot{
		version:    version,
		items:      make(map[string]map[string]types.ResourceWithTTL, len(res)),
		versionMap: make(map[string]map[string]string, len(res)),
		wire:       make(map[string]map[string]types.ResourceWithTTL, len(res)),
	}
	envoy := map[resource.Type][]types.Resource{}
	for _, typeURL := range TypeURLs {
		list, ok := res[typeURL]
		if !ok {
			return nil, fmt.Errorf("%w: type %s missing", ErrInvalidOutput, typeURL)
		}
		byName := make(map[string]types.ResourceWithTTL, len(list))
		wire := make(map[string]types.ResourceWithTTL, len(list))
		hashes := make(map[string]string, len(list))
		for _, r := range list {
			name := cache.GetResourceName(r)
			if name == "" {
				return nil, fmt.Errorf("%w: %s resource without a name", ErrInvalidOutput, typeURL)
			}
			if _, dup := byName[name]; dup {
				return nil, fmt.Errorf("%w: duplicate %s %q", ErrInvalidOutput, typeURL, name)
			}
			k, ok := known[r]
			h, b := k.hash, k.wire
			if !ok {
				var err error
				if h, b, err = checkAndEncode(typeURL, name, r); err != nil {
					return nil, err
				}
			}
			byName[name] = types.ResourceWithTTL{Resource: r}
			wire[name] = types.ResourceWithTTL{Resource: newEncoded(name, r, b)}
			hashes[name] = h
		}
		s.items[typeURL] = byName
		s.wire[typeURL] = wire
		s.versionMap[typeURL] = hashes
		if cache.GetResponseType(typeURL) != types.UnknownType {
			envoy[typeURL] = list
		}
	}
	if len(res) != len(TypeURLs) {
		return nil, fmt.Errorf("%w: unexpected resource types", ErrInvalidOutput)
	}
	es, err := cache.NewSnapshot(version, envoy)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOutput, err)
	}
	if err := es.Consistent(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOutput, err)
	}
	s.envoy = es
	s.encoded = &encodedSnapshot{view: s, items: s.wire}
	views := new([numViews]*Snapshot)
	for v := range numViews {
		views[v] = s.view(v, sds)
		views[v].views = views
	}
	s.views = views
	return s, nil
}

// checkAndHash validates r (ValidateAll) and returns the hash of its
// deterministic encoding: its version in delta xDS.
func checkAndHash(typeURL, name string, r Resource) (string, error) {
	h, _, err := checkAndEncode(typeURL, name, r)
	return h, err
}

// checkAndEncode is checkAndHash returning the encoding too: the bytes
// go-control-plane's MarshalResource produces, which every stream sends.
func checkAndEncode(typeURL, name string, r Resource) (string, []byte, error) {
	if v, ok := r.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return "", nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidOutput, typeURL, name, err)
		}
	}
	b, err := cache.MarshalResource(r)
	if err != nil {
		return "", nil, fmt.Errorf("%w: marshal %s %q: %w", ErrInvalidOutput, typeURL, name, err)
	}
	return cache.HashResource(b), b, nil
}

// view returns the snapshot restricted to what v may receive. Types it
// keeps whole share their maps with s; the rest are fresh (s is immutable).
func (s *Snapshot) view(v View, sds *sdsMemo) *Snapshot {
	out := *s
	out.items = make(map[string]map[string]types.ResourceWithTTL, len(s.items))
	out.versionMap = make(map[string]map[string]string, len(s.versionMap))
	out.wire = make(map[string]map[string]types.ResourceWithTTL, len(s.wire))
	keep := map[string]func(name string, r types.Resource) bool{}
	for _, t := range viewTypes[v] {
		keep[t] = nil
	}
	if v == ViewGateway {
		keep[ListenerType] = func(_ string, r types.Resource) bool {
			l, ok := r.(*listenerv3.Listener)
			return !ok || l.GetApiListener() == nil
		}
		refs := map[string]bool{}
		for _, t := range []string{ListenerType, ClusterType} {
			for name, r := range s.items[t] {
				for _, ref := range sds.names(s.versionMap[t][name], r.Resource) {
					refs[ref] = true
				}
			}
		}
		keep[SecretType] = func(name string, _ types.Resource) bool { return refs[name] }
	}
	for typeURL, items := range s.items {
		filter, ok := keep[typeURL]
		switch {
		case !ok:
			out.items[typeURL] = map[string]types.ResourceWithTTL{}
			out.versionMap[typeURL] = map[string]string{}
			out.wire[typeURL] = map[string]types.ResourceWithTTL{}
		case filter == nil:
			out.items[typeURL] = items
			out.versionMap[typeURL] = s.versionMap[typeURL]
			out.wire[typeURL] = s.wire[typeURL]
		default:
			kept := map[string]types.ResourceWithTTL{}
			hashes := map[string]string{}
			wire := map[string]types.ResourceWithTTL{}
			for name, r := range items {
				if filter(name, r.Resource) {
					kept[name] = r
					hashes[name] = s.versionMap[typeURL][name]
					wire[name] = s.wire[typeURL][name]
				}
			}
			out.items[typeURL], out.versionMap[typeURL], out.wire[typeURL] = kept, hashes, wire
		}
	}
	out.encoded = &encodedSnapshot{view: &out, items: out.wire}
	return &out
}

// sdsMemo remembers the SDS secrets each resource references, by the
// SHA-256 of its encoding, from one compile to the next: the walk in
// sdsNames reflects over every listener and cluster, unpacking every Any,
// and was a third of a one-route change's compile at 1,000 clusters, while
// the hashes are computed anyway. next holds only what this compile looked
// up, so the memo never outgrows the config. nil: no memo.
type sdsMemo struct {
	prev, next map[string][]string
}

func newSDSMemo(prev *sdsMemo) *sdsMemo {
	m := &sdsMemo{next: map[string][]string{}}
	if prev != nil {
		m.prev = prev.next
	}
	return m
}

// names is sdsNames of r, whose encoding hashes to hash.
func (m *sdsMemo) names(hash string, r types.Resource) []string {
	if m == nil {
		return sdsNames(r)
	}
	if n, ok := m.next[hash]; ok {
		return n
	}
	n, ok := m.prev[hash]
	if !ok {
		n = sdsNames(r)
	}
	m.next[hash] = n
	return n
}

// sdsNames returns the names of the SDS secrets r references, wherever it
// does (listener filter chains, cluster transport sockets), looking inside
// typed Any configs.
func sdsNames(r types.Resource) []string {
	names := map[string]bool{}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if sds, ok := m.Interface().(*tlsv3.SdsSecretConfig); ok {
			names[sds.GetName()] = true
			return
		}
		if a, ok := m.Interface().(*anypb.Any); ok {
			if inner, err := a.UnmarshalNew(); err == nil {
				walk(inner.ProtoReflect())
			}
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				return true
			}
			switch {
			case fd.IsList():
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap():
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
						walk(mv.Message())
						return true
					})
				}
			default:
				walk(v.Message())
			}
			return true
		})
	}
	if m, ok := r.(proto.Message); ok {
		walk(m.ProtoReflect())
	}
	return slices.Sorted(maps.Keys(names))
}

// View returns what a client of kind v may receive. Every view shares
// everything it keeps with s and is the same value on every call.
func (s *Snapshot) View(v View) cache.ResourceSnapshot { return s.views[v] }

// Version is the config version the snapshot was compiled from.
func (s *Snapshot) Version() string { return s.version }

// GetVersion returns the snapshot version for every type it serves (even
// with no resources, so subscribers get an empty answer) and "" otherwise.
func (s *Snapshot) GetVersion(typeURL string) string {
	if _, ok := s.items[typeURL]; !ok {
		return ""
	}
	return s.version
}

// GetResourcesAndTTL returns the resources of typeURL keyed by name.
func (s *Snapshot) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return s.items[typeURL]
}

// GetResources returns the resources of typeURL keyed by name.
func (s *Snapshot) GetResources(typeURL string) map[string]types.Resource {
	return withoutTTL(s.items[typeURL])
}

// withoutTTL is items' resources keyed by name (nil for nil items).
func withoutTTL(items map[string]types.ResourceWithTTL) map[string]types.Resource {
	if items == nil {
		return nil
	}
	out := make(map[string]types.Resource, len(items))
	for k, v := range items {
		out[k] = v.Resource
	}
	return out
}

// ConstructVersionMap is a no-op: the map is built when compiling.
func (s *Snapshot) ConstructVersionMap() error { return nil }

// GetVersionMap returns resource name → content hash for delta xDS.
func (s *Snapshot) GetVersionMap(typeURL string) map[string]string {
	return s.versionMap[typeURL]
}

// Consistent re-runs go-control-plane's reference check (EDS names equal
// CDS EDS clusters, RDS names equal the listeners' references).
func (s *Snapshot) Consistent() error {
	if s == nil || s.envoy == nil {
		return errors.New("compile: nil snapshot")
	}
	return s.envoy.Consistent()
}

// Envoy returns the Envoy-typed part of the snapshot as a cache.Snapshot.
func (s *Snapshot) Envoy() *cache.Snapshot { return s.envoy }

// Resources returns the resources of typeURL sorted by name.
func (s *Snapshot) Resources(typeURL string) []Resource {
	return ResourcesOf(s, typeURL)
}

// ResourcesOf returns the resources of typeURL in snap sorted by name.
func ResourcesOf(snap cache.ResourceSnapshot, typeURL string) []Resource {
	items := snap.GetResourcesAndTTL(typeURL)
	names := make([]string, 0, len(items))
	for n := range items {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Resource, 0, len(names))
	for _, n := range names {
		out = append(out, items[n].Resource)
	}
	return out
}

// Equal reports whether a and b hold byte-identical resources (deterministic
// marshalling) at the same version.
func Equal(a, b *Snapshot) bool {
	if a.version != b.version {
		return false
	}
	for _, t := range TypeURLs {
		ha, hb := a.versionMap[t], b.versionMap[t]
		if len(ha) != len(hb) {
			return false
		}
		for k, v := range ha {
			if hb[k] != v {
				return false
			}
		}
	}
	return true
}
