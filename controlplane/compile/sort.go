package compile

import (
	"sort"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// sortFunc is a stable sort with a less function; stability keeps equal
// elements in input order, which is itself deterministic.
func sortFunc[T any](s []T, less func(a, b T) bool) {
	sort.SliceStable(s, func(i, j int) bool { return less(s[i], s[j]) })
}

func sortByName(rs []Resource) {
	sortFunc(rs, func(a, b Resource) bool { return cache.GetResourceName(a) < cache.GetResourceName(b) })
}
