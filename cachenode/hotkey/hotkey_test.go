package hotkey

import (
	"fmt"
	"testing"
)

func TestTopKFindsHotKeysUnderSampling(t *testing.T) {
	tr := New(Config{SampleEvery: 10, K: 4})
	// Zipf-like: key i is accessed 10000/(i+1) times, interleaved.
	for round := range 10000 {
		for i := range 200 {
			if round < 10000/(i+1) {
				tr.Observe([]byte(fmt.Sprintf("k%d", i)))
			}
		}
	}
	top := tr.Top()
	if len(top) != 4 {
		t.Fatalf("top = %v", top)
	}
	for i, want := range []string{"k0", "k1", "k2", "k3"} {
		if top[i].Key != want {
			t.Fatalf("top = %v, want k0..k3 in order", top)
		}
	}
	// Estimates are in sampled accesses: k0 had 10000 accesses, 1 in 10 sampled.
	if top[0].Count < 900 || top[0].Count > 1200 {
		t.Fatalf("k0 estimate %d, want ~1000", top[0].Count)
	}
	if tr.Sampled() == 0 || tr.SampleEvery() != 10 {
		t.Fatal("sampling counters")
	}
	tr.Reset()
	if len(tr.Top()) != 0 {
		t.Fatal("Reset kept keys")
	}
}

func TestSinkReceivesSampledKeys(t *testing.T) {
	var got []string
	tr := New(Config{SampleEvery: 3, Sink: func(k string) { got = append(got, k) }})
	for i := range 9000 {
		tr.Observe([]byte(fmt.Sprint(i)))
	}
	if len(got) < 2700 || len(got) > 3300 || uint64(len(got)) != tr.Sampled() {
		t.Fatalf("sink got %d keys of 9000 sampled 1 in 3 (Sampled %d)", len(got), tr.Sampled())
	}
}
