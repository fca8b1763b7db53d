package storage

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

func TestScanCoversExactlyTheRangeIncludingWrap(t *testing.T) {
	st, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var toks []uint64
	for i := range 300 {
		k := fmt.Appendf(nil, "key-%d", i)
		if _, err := st.Apply(k, []*kvv1.Record{{Timestamp: 1, Value: k}}); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, ring.Token(k))
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i] < toks[j] })
	cases := []ring.Range{
		{Start: toks[10], End: toks[50]},
		{Start: toks[250], End: toks[20]}, // wraps
		{Start: 7, End: 7},                // whole ring
		{Start: math.MaxUint64, End: toks[5]},
	}
	for _, rg := range cases {
		want := 0
		for _, tk := range toks {
			if rg.Contains(tk) {
				want++
			}
		}
		got := 0
		if err := st.Scan(rg, nil, time.Time{}, func(e Entry) bool {
			if !rg.Contains(e.Token) {
				t.Fatalf("scan of %v returned token %d", rg, e.Token)
			}
			got++
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("scan of %v: %d keys, want %d", rg, got, want)
		}
	}
}

func TestApplyIsIdempotentAndUseAfterCloseErrors(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := []*kvv1.Record{{Timestamp: 5, Value: []byte("v")}}
	for range 2 {
		if _, err := st.Apply([]byte("k"), r); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := st.Get([]byte("k"))
	if len(got) != 1 || string(got[0].Value) != "v" {
		t.Fatalf("get = %v", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get([]byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
}
