package cp_test

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// etcdGRPCTarget drives etcd through its native gRPC API (etcdserverpb.KV),
// as etcd's own clients do: one multiplexed HTTP/2 connection per member.
// The HTTP/JSON gateway (etcdTarget) adds a loopback gRPC hop inside etcd
// per request; this row shows etcd without it. The messages are encoded
// by hand with protowire (field numbers from etcd's rpc.proto and kv.proto)
// so Portico's go.mod does not gain etcd's client. Like etcd's client, it
// sends the auth token as the "token" metadata of every call.
type etcdGRPCTarget struct {
	conns []*grpc.ClientConn
	token string
}

// newEtcdGRPCTarget dials each member over TLS with tc.
func newEtcdGRPCTarget(addrs []string, tc *tls.Config, token string) (*etcdGRPCTarget, error) {
	t := &etcdGRPCTarget{token: token}
	for _, a := range addrs {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(credentials.NewTLS(tc.Clone())))
		if err != nil {
			t.close()
			return nil, err
		}
		t.conns = append(t.conns, c)
	}
	return t, nil
}

func (t *etcdGRPCTarget) close() {
	for _, c := range t.conns {
		_ = c.Close()
	}
}

// rawCodec passes already-encoded protobuf bytes through gRPC.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}

func (t *etcdGRPCTarget) call(ctx context.Context, m int, method string, req []byte) ([]byte, error) {
	var resp []byte
	if t.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "token", t.token)
	}
	err := t.conns[m].Invoke(ctx, "/etcdserverpb.KV/"+method, &req, &resp, grpc.ForceCodec(rawCodec{}))
	return resp, err
}

func putRequest(key, val []byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, val)
}

func (t *etcdGRPCTarget) put(ctx context.Context, m int, key string, val []byte) error {
	_, err := t.call(ctx, m, "Put", putRequest([]byte("bench/"+key), val))
	return err
}

func (t *etcdGRPCTarget) cas(ctx context.Context, m int, key string, val []byte) (bool, error) {
	k := []byte("bench/" + key)
	req := protowire.AppendTag(nil, 1, protowire.BytesType) // RangeRequest.key
	req = protowire.AppendBytes(req, k)
	resp, err := t.call(ctx, m, "Range", req)
	if err != nil {
		return false, err
	}
	// RangeResponse.kvs (2) → KeyValue.mod_revision (3).
	var rev int64
	kv, err := field(resp, 2)
	if err != nil {
		return false, err
	}
	if kv != nil {
		if rev, err = varintField(kv, 3); err != nil {
			return false, err
		}
	}
	var cmp []byte // Compare{result: EQUAL (0, default), target: MOD, key, mod_revision}
	cmp = protowire.AppendTag(cmp, 2, protowire.VarintType)
	cmp = protowire.AppendVarint(cmp, 2)
	cmp = protowire.AppendTag(cmp, 3, protowire.BytesType)
	cmp = protowire.AppendBytes(cmp, k)
	cmp = protowire.AppendTag(cmp, 6, protowire.VarintType)
	cmp = protowire.AppendVarint(cmp, uint64(rev))
	op := protowire.AppendTag(nil, 2, protowire.BytesType) // RequestOp.request_put
	op = protowire.AppendBytes(op, putRequest(k, val))
	txn := protowire.AppendTag(nil, 1, protowire.BytesType) // TxnRequest.compare
	txn = protowire.AppendBytes(txn, cmp)
	txn = protowire.AppendTag(txn, 2, protowire.BytesType) // TxnRequest.success
	txn = protowire.AppendBytes(txn, op)
	if resp, err = t.call(ctx, m, "Txn", txn); err != nil {
		return false, err
	}
	ok, err := varintField(resp, 2) // TxnResponse.succeeded
	return ok == 1, err
}

// field returns the first length-delimited field num of a message (nil
// when absent).
func field(b []byte, num protowire.Number) ([]byte, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil, protowire.ParseError(l)
			}
			return v, nil
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil, nil
}

// varintField returns varint field num of a message (0 when absent).
func varintField(b []byte, num protowire.Number) (int64, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num {
			if typ != protowire.VarintType {
				return 0, fmt.Errorf("field %d has wire type %d", n, typ)
			}
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0, protowire.ParseError(l)
			}
			return int64(v), nil
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return 0, nil
}
