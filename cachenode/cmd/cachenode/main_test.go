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
