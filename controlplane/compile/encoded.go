package compile

import (
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoiface"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Encoded resources.
//
// go-control-plane marshals every resource it sends once per response, and
// a response is built per stream: with hundreds of gateways each version's
// RouteConfiguration (megabytes) was encoded hundreds of times. The compile
// already encodes every resource once (checkAndHash, for its delta
// version); a snapshot keeps those bytes, and Encoded hands go-control-plane
// resources whose encoding is those very bytes (wireMessage), not a copy.
//
// An encoded resource is an emptypb.Empty whose unknown fields are the
// resource's deterministic encoding: proto.Marshal, deterministic or not,
// emits unknown fields verbatim, so go-control-plane's MarshalResource
// returns exactly the bytes it would have produced from the real message,
// and its delta version (HashResource of those bytes) equals the snapshot's
// version map. GetName keeps cache.GetResourceName working. The Any type
// URL of a response is the request's, never the message's, so the wrapper
// type never shows on the wire.
//
// What go-control-plane must not do with them (true of v0.14; revisit on an
// upgrade): inspect resources by their concrete type. Its SnapshotCache
// does so only in cache.GetResourceReferences / Snapshot.Consistent, which
// Portico runs on the real messages (Snapshot.Consistent), and for TTL
// wrapping, which Portico does not use.

// encoded is one resource as handed to go-control-plane. It is immutable
// once encoded and safe for concurrent use.
type encoded struct {
	name string
	src  Resource
	once sync.Once
	// wire carries the encoding; nil when encoding src failed, in which
	// case ProtoReflect is src's (go-control-plane then marshals src
	// itself, as it did before).
	wire *wireMessage
}

var _ types.ResourceWithName = (*encoded)(nil)

// newEncoded wraps src; b is its deterministic encoding, or nil to encode
// it on first use (resources a compile reused without encoding them).
func newEncoded(name string, src Resource, b []byte) *encoded {
	e := &encoded{name: name, src: src}
	if b != nil {
		e.once.Do(func() { e.wire = wireOf(b) })
	}
	return e
}

func wireOf(b []byte) *wireMessage {
	w := &emptypb.Empty{}
	// SetUnknown keeps b (no copy); nothing writes to it afterwards.
	w.ProtoReflect().SetUnknown(protoreflect.RawFields(b))
	return &wireMessage{Message: w.ProtoReflect(), b: b[:len(b):len(b)]}
}

// wireMessage is the reflection of an encoded resource: an Empty whose
// unknown fields are the encoding, for every generic path (size, range,
// equality), plus a fast marshal that hands out the encoding itself
// instead of a copy. go-control-plane marshals a resource once per
// response, and a response is built per stream: with hundreds of gateways
// a version's route configuration (megabytes) was copied, and its copies
// collected, hundreds of times. The slice handed out has no spare
// capacity, so appending to it copies; nothing writes into it (an Any's
// Value is only read).
type wireMessage struct {
	protoreflect.Message
	b []byte
}

func (m *wireMessage) ProtoMethods() *protoiface.Methods { return &wireMethods }

// wireMethods leaves Size unset on purpose: with a Size, proto.Marshal
// allocates the output buffer before calling Marshal.
var wireMethods = protoiface.Methods{
	Flags: protoiface.SupportMarshalDeterministic,
	Marshal: func(in protoiface.MarshalInput) (protoiface.MarshalOutput, error) {
		b := in.Message.(*wireMessage).b
		if len(in.Buf) == 0 {
			return protoiface.MarshalOutput{Buf: b}, nil
		}
		return protoiface.MarshalOutput{Buf: append(in.Buf, b...)}, nil
	},
}

func (e *encoded) GetName() string { return e.name }

// ProtoReflect is the reflection of the encoding: all a marshal sees.
func (e *encoded) ProtoReflect() protoreflect.Message {
	e.once.Do(func() {
		if b, err := cache.MarshalResource(e.src); err == nil {
			e.wire = wireOf(b)
		}
	})
	if e.wire == nil {
		return e.src.ProtoReflect()
	}
	return e.wire
}

// encodedSnapshot is a snapshot view as go-control-plane's cache is given
// it: the view's versions, and its resources as encoded ones. It is built
// with the view and shared by every node served that view.
type encodedSnapshot struct {
	view  *Snapshot
	items map[string]map[string]types.ResourceWithTTL
}

var _ cache.ResourceSnapshot = (*encodedSnapshot)(nil)

func (e *encodedSnapshot) GetVersion(typeURL string) string { return e.view.GetVersion(typeURL) }

func (e *encodedSnapshot) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return e.items[typeURL]
}

func (e *encodedSnapshot) GetResources(typeURL string) map[string]types.Resource {
	return withoutTTL(e.items[typeURL])
}

func (e *encodedSnapshot) ConstructVersionMap() error { return nil }

func (e *encodedSnapshot) GetVersionMap(typeURL string) map[string]string {
	return e.view.GetVersionMap(typeURL)
}

// Encoded returns s as go-control-plane's cache must be given it: the same
// versions and resources, each resource encoded once for every stream that
// sends it. Only the cache may see it: its resources are not the compiled
// messages (use s for those). The same value on every call.
func (s *Snapshot) Encoded() cache.ResourceSnapshot { return s.encoded }
