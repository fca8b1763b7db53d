package coordinator

import (
	"fmt"
	"strings"
)

// Level is a per-request consistency level.
type Level int

// Consistency levels.
const (
	One Level = iota + 1
	Quorum
	All
)

// ParseLevel parses ONE, QUORUM or ALL (case-insensitive); "" is QUORUM.
func ParseLevel(s string) (Level, error) {
	switch strings.ToUpper(s) {
	case "", "QUORUM":
		return Quorum, nil
	case "ONE":
		return One, nil
	case "ALL":
		return All, nil
	}
	return 0, fmt.Errorf("%w: %q (ONE, QUORUM or ALL)", ErrBadLevel, s)
}

func (l Level) String() string {
	switch l {
	case One:
		return "ONE"
	case Quorum:
		return "QUORUM"
	case All:
		return "ALL"
	}
	return "UNKNOWN"
}

// Required is how many of n replicas must answer.
func (l Level) Required(n int) int {
	switch l {
	case One:
		return min(1, n)
	case All:
		return n
	}
	return n/2 + 1
}
