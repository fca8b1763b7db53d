package compile

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// normalized returns a copy of m whose Any fields (at any depth) are
// re-packed with deterministic marshalling, so that proto.Equal compares
// content rather than the byte order of maps inside Anys.
func normalized(t testing.TB, m proto.Message) proto.Message {
	t.Helper()
	c := proto.Clone(m)
	normalizeAnys(t, c.ProtoReflect())
	return c
}

func normalizeAnys(t testing.TB, m protoreflect.Message) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
		}
		normalizeAnys(t, inner.ProtoReflect())
		if err := anypb.MarshalFrom(a, inner, proto.MarshalOptions{Deterministic: true}); err != nil {
			t.Fatal(err)
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				normalizeAnys(t, l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				normalizeAnys(t, mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			normalizeAnys(t, v.Message())
		}
		return true
	})
}
