package namespace

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBytes reads a memory size as redis.conf does: a plain number of
// bytes, or a number with a unit k/kb, m/mb, g/gb (k = 1000, kb = 1024),
// case-insensitive.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%w: %q (want e.g. 1048576, 256mb, 1gb)", ErrBadByteValue, s)
	}
	return n * mult, nil
}
