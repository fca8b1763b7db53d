package main

import "testing"

func TestMemoryLimit(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct{ maxmem, cgroup, want int64 }{
		{0, 0, 0},
		{256 * mb, 0, 448 * mb},
		{0, 1000 * mb, 900 * mb},
		{256 * mb, 1000 * mb, 448 * mb},
		{1000 * mb, 1250 * mb, 1125 * mb}, // container limit binds
	} {
		if got := memoryLimit(tc.maxmem, tc.cgroup); got != tc.want {
			t.Errorf("memoryLimit(%d, %d) = %d, want %d", tc.maxmem, tc.cgroup, got, tc.want)
		}
	}
}

func TestParseLoops(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"auto", 0, false}, {"", 0, false}, {"off", -1, false}, {"1", 1, false}, {"4", 4, false},
		{"0", 0, true}, {"-1", 0, true}, {"1025", 0, true}, {"two", 0, true},
	} {
		got, err := parseLoops(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseLoops(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
