package compile

import (
	"errors"
	"fmt"
	"maps"
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

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

	JwtProviderType    = resource.APITypePrefix + "portico.auth.v1.JwtProvider"
	ApiKeyShardType    = resource.APITypePrefix + "portico.auth.v1.ApiKeyShard"
	RevocationListType = resource.APITypePrefix + "portico.auth.v1.RevocationList"
	RateLimitRuleType  = resource.APITypePrefix + "portico.ratelimit.v1.RateLimitRule"
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
	// proxy is the view served to Envoy proxies: the same resources minus
	// the API listeners meant for proxyless gRPC clients, which Envoy can
	// only take from its bootstrap and would warn about on every push.
	// It is the snapshot itself when there are none.
	proxy *Snapshot
	// client is the view served to every other client (proxyless gRPC,
	// extauthz, ratelimitsvc): no SDS secrets, so private keys go to
	// Envoy proxies only. It is the snapshot itself when there are none.
	client *Snapshot
}

var _ cache.ResourceSnapshot = (*Snapshot)(nil)

type validator interface{ ValidateAll() error }

// newSnapshot indexes res by name, validates every resource, checks
// consistency and precomputes the delta version map, so that the snapshot is
// never written to after it is returned.
func newSnapshot(version string, res map[string][]Resource) (*Snapshot, error) {
	s := &Snapshot{
		version:    version,
		items:      make(map[string]map[string]types.ResourceWithTTL, len(res)),
		versionMap: make(map[string]map[string]string, len(res)),
	}
	envoy := map[resource.Type][]types.Resource{}
	for _, typeURL := range TypeURLs {
		list, ok := res[typeURL]
		if !ok {
			return nil, fmt.Errorf("%w: type %s missing", ErrInvalidOutput, typeURL)
		}
		byName := make(map[string]types.ResourceWithTTL, len(list))
		hashes := make(map[string]string, len(list))
		for _, r := range list {
			name := cache.GetResourceName(r)
			if name == "" {
				return nil, fmt.Errorf("%w: %s resource without a name", ErrInvalidOutput, typeURL)
			}
			if _, dup := byName[name]; dup {
				return nil, fmt.Errorf("%w: duplicate %s %q", ErrInvalidOutput, typeURL, name)
			}
			if v, ok := r.(validator); ok {
				if err := v.ValidateAll(); err != nil {
					return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidOutput, typeURL, name, err)
				}
			}
			b, err := cache.MarshalResource(r)
			if err != nil {
				return nil, fmt.Errorf("%w: marshal %s %q: %w", ErrInvalidOutput, typeURL, name, err)
			}
			byName[name] = types.ResourceWithTTL{Resource: r}
			hashes[name] = cache.HashResource(b)
		}
		s.items[typeURL] = byName
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
	s.proxy = s.withoutAPIListeners()
	s.client = s.withoutSecrets()
	// Each view leads to the other, whichever a Policy hands out.
	s.proxy.client = s.client
	return s, nil
}

func (s *Snapshot) withoutSecrets() *Snapshot {
	if len(s.items[SecretType]) == 0 {
		return s
	}
	v := *s
	v.items = maps.Clone(s.items)
	v.items[SecretType] = map[string]types.ResourceWithTTL{}
	v.versionMap = maps.Clone(s.versionMap)
	v.versionMap[SecretType] = map[string]string{}
	v.client = &v
	return &v
}

func (s *Snapshot) withoutAPIListeners() *Snapshot {
	listeners := s.items[ListenerType]
	keep := make(map[string]types.ResourceWithTTL, len(listeners))
	hashes := make(map[string]string, len(listeners))
	for name, r := range listeners {
		if l, ok := r.Resource.(*listenerv3.Listener); ok && l.GetApiListener() != nil {
			continue
		}
		keep[name] = r
		hashes[name] = s.versionMap[ListenerType][name]
	}
	if len(keep) == len(listeners) {
		return s
	}
	v := *s
	v.items = maps.Clone(s.items)
	v.items[ListenerType] = keep
	v.versionMap = maps.Clone(s.versionMap)
	v.versionMap[ListenerType] = hashes
	v.proxy = &v
	return &v
}

// ForProxy returns the view of the snapshot served to Envoy proxies (no
// proxyless API listeners). It shares everything else with s.
func (s *Snapshot) ForProxy() cache.ResourceSnapshot { return s.proxy }

// ForClient returns the view served to xDS clients that are not Envoy
// proxies: no SDS secrets. It shares everything else with s and is the
// same value on every call.
func (s *Snapshot) ForClient() cache.ResourceSnapshot { return s.client }

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
	items, ok := s.items[typeURL]
	if !ok {
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
