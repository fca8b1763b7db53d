// Package xdscontract names what both ends of Portico's xDS contract
// (ARCHITECTURE.md) use: the type URLs of Portico's own resources, the node
// clusters and metadata key clients announce, and the context extensions
// the compiled gateway config hands extauthz. The control plane and its
// clients import these instead of each spelling the strings, so the two
// sides cannot drift apart. Type URLs are derived from the proto
// descriptors, so renaming a message changes them on both sides at once.
package xdscontract

import (
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
)

// Node clusters: the cluster field of the node each kind of client
// announces, which also picks the view of the config it is served.
const (
	NodeClusterGateway   = "portico-gateway"
	NodeClusterExtAuthz  = "portico-extauthz"
	NodeClusterRateLimit = "portico-ratelimit"
)

// GroupMetadataKey is the node metadata field naming a gateway's rollout
// group (default "default").
const GroupMetadataKey = "portico.group"

// Context extension keys the gateway sends extauthz with every check
// request (the route's ext_authz per-filter config).
const (
	CtxRoute    = "route"
	CtxMode     = "mode"
	CtxProvider = "provider"
	CtxScopes   = "scopes"
)

// Type URLs of Portico's own xDS resources.
var (
	JwtProviderType    = TypeURL((*authv1.JwtProvider)(nil))
	ApiKeyShardType    = TypeURL((*authv1.ApiKeyShard)(nil))
	RevocationListType = TypeURL((*authv1.RevocationList)(nil))
	RateLimitRuleType  = TypeURL((*ratelimitv1.RateLimitRule)(nil))
)

// TypeURL is the xDS type URL of m's message type.
func TypeURL(m proto.Message) string {
	return resource.APITypePrefix + string(m.ProtoReflect().Descriptor().FullName())
}
