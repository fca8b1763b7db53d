package hotkey

import (
	"fmt"
	"testing"
)

func TestTopKFindsHotKeysUnderSampling(t *testing.T) {
	// No aging here: this checks the estimates.
	tr := New(Config{SampleEvery: 10, K: 4, AgeEvery: 1 << 30})
	// Zipf-like: key i is accessed 40000/(i+1) times, interleaved. At 1
	// in 10 sampled, k3 (10000 accesses) and k4 (8000) are 200 samples
	// apart, five standard deviations of the difference: the order is
	// not left to chance.
	keys := make([][]byte, 200)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("k%d", i))
	}
	for round := range 40000 {
		for i := 0; i < len(keys) && round < 40000/(i+1); i++ {
			tr.Observe(keys[i])
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
	// Estimates are in sampled accesses: k0 had 40000 accesses, 1 in 10 sampled.
	if top[0].Count < 3700 || top[0].Count > 4400 {
		t.Fatalf("k0 estimate %d, want ~4000", top[0].Count)
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

// TestCountsAge: a key that was hot earlier gives way to the keys hot now.
// Without aging "old" (5000 accesses) would keep its place above both new
// keys (3000 each).
func TestCountsAge(t *testing.T) {
	tr := New(Config{SampleEvery: 1, K: 2, Width: 64, AgeEvery: 640})
	for range 5000 {
		tr.Observe([]byte("old"))
	}
	for range 3000 {
		tr.Observe([]byte("new1"))
		tr.Observe([]byte("new2"))
	}
	top := tr.Top()
	if len(top) != 2 || top[0].Key == "old" || top[1].Key == "old" {
		t.Fatalf("top = %v, want new1 and new2", top)
	}
	for _, k := range top {
		if k.Count > 640 {
			t.Fatalf("%s counts %d, more than one aging period of samples", k.Key, k.Count)
		}
	}
}

func TestSetSampleEveryClears(t *testing.T) {
	tr := New(Config{SampleEvery: 1})
	tr.Observe([]byte("k"))
	tr.SetSampleEvery(1)
	if len(tr.Top()) != 1 {
		t.Fatal("an unchanged rate cleared the counts")
	}
	tr.SetSampleEvery(7)
	if len(tr.Top()) != 0 || tr.SampleEvery() != 7 || tr.Sampled() != 0 {
		t.Fatalf("after a rate change: top %v, every %d", tr.Top(), tr.SampleEvery())
	}
}
