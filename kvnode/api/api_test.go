package api

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/record"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// FuzzParseWrite drives the HTTP edge of PUT/DELETE with arbitrary keys,
// query strings, context and idempotency headers and bodies: it must never
// panic, must accept only what the limits allow, and must explain every
// rejection with a 400/413 naming the field.
func FuzzParseWrite(f *testing.F) {
	ctx := record.EncodeContext([]*kvv1.VersionEntry{{Node: "n1", Counter: 7}})
	f.Add("cart:1", "consistency=QUORUM&ttl=60", ctx, "op-1", []byte("v"), false)
	f.Add("", "", "", "", []byte{}, true)
	f.Add("k", "consistency=one", "%%", "", []byte("x"), false)
	f.Add("k", "ttl=99999999999", "", "", []byte("x"), false)
	f.Add("k", "consistency=ALL&consistency=ONE", "AAAA", "", []byte("x"), true)
	f.Add(string(bytes.Repeat([]byte("k"), 257)), "", "", "", []byte("x"), false)
	f.Fuzz(func(t *testing.T, key, query, xctx, idem string, body []byte, del bool) {
		r := httptest.NewRequest(http.MethodPut, "/v1/kv/x", bytes.NewReader(body))
		r.URL.RawQuery = query
		r.SetPathValue("key", key)
		r.Header.Set("X-KV-Context", xctx)
		r.Header.Set("Idempotency-Key", idem)
		wr, err := ParseWrite(r, del)
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) {
				t.Fatalf("non-validation error %v", err)
			}
			if br.Field == "" || (br.Status != http.StatusBadRequest && br.Status != http.StatusRequestEntityTooLarge) {
				t.Fatalf("bad rejection %+v", br)
			}
			return
		}
		if len(wr.Key) == 0 || len(wr.Key) > MaxKeyBytes || string(wr.Key) != key {
			t.Fatalf("accepted key of %d bytes", len(wr.Key))
		}
		if len(wr.Value) > MaxValueBytes || (!del && !bytes.Equal(wr.Value, body)) {
			t.Fatalf("value mangled or over the limit")
		}
		if wr.Opts.TTL < 0 || wr.Opts.TTL > MaxTTL {
			t.Fatalf("ttl %s accepted", wr.Opts.TTL)
		}
		if wr.Opts.Level < coordinator.One || wr.Opts.Level > coordinator.All {
			t.Fatalf("level %d accepted", wr.Opts.Level)
		}
		if len(wr.Opts.IdempotencyKey) > MaxIdempotencyKeyBytes {
			t.Fatal("idempotency key over the limit accepted")
		}
		for _, e := range wr.Opts.Context {
			if e.Node == "" || e.Counter == 0 {
				t.Fatalf("empty context entry accepted: %v", e)
			}
		}
	})
}

func TestOversizedBodyIs413EvenWithoutContentLength(t *testing.T) {
	r := httptest.NewRequest(http.MethodPut, "/v1/kv/x", bytes.NewReader(make([]byte, MaxValueBytes+1)))
	r.ContentLength = -1
	r.SetPathValue("key", "k")
	_, err := ParseWrite(r, false)
	var br *BadRequest
	if !errors.As(err, &br) || br.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("err = %v, want 413", err)
	}
}

func FuzzParseBatchGet(f *testing.F) {
	f.Add([]byte(`{"keys":["a","b"],"consistency":"ONE"}`))
	f.Add([]byte(`{"keys":[""]}`))
	f.Add([]byte(`{"keys":["a"],"extra":1}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, l, err := ParseBatchGet(bytes.NewReader(body))
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) || br.Status != http.StatusBadRequest || br.Field == "" {
				t.Fatalf("bad rejection %v", err)
			}
			return
		}
		if l < coordinator.One || l > coordinator.All {
			t.Fatalf("level %d", l)
		}
		for _, k := range keys {
			if len(k) == 0 || len(k) > MaxKeyBytes {
				t.Fatalf("key of %d bytes accepted", len(k))
			}
		}
	})
}
