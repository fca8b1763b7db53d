package rollout

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
)

// Defaults for zero Spec fields.
const (
	DefaultBakeSeconds = 60
	// MaxBakeSeconds bounds a wave's bake (one day).
	MaxBakeSeconds = 86400
	// MaxWaves bounds the number of waves of one rollout.
	MaxWaves = 100
)

// Spec is a rollout request.
type Spec struct {
	// TargetVersion is the config version to roll out; 0 means the head.
	TargetVersion int64 `json:"targetVersion,omitempty"`
	// Waves are applied in order; membership is cumulative.
	Waves []Wave `json:"waves"`
	// BakeSeconds is how long each wave runs before the next starts
	// (0 means DefaultBakeSeconds).
	BakeSeconds int `json:"bakeSeconds,omitempty"`
	// MaxNackRatio is the largest tolerated fraction of rollout nodes that
	// NACKed the target; above it the rollout rolls back. 0: any NACK fails.
	MaxNackRatio float64 `json:"maxNackRatio"`
	// MinNodes is how many nodes must be in the rollout before a wave may
	// complete; a wave with fewer keeps baking (0: no minimum).
	MinNodes int `json:"minNodes,omitempty"`
}

// Wave selects nodes either by group or by a percentage of node ids;
// exactly one of the two is set.
type Wave struct {
	// Groups are node groups (node metadata portico.group).
	Groups []string `json:"groups,omitempty"`
	// Percent selects nodes whose fnv32a(id) % 100 < Percent, so a larger
	// percentage keeps every node a smaller one selected.
	Percent int `json:"percent,omitempty"`
}

func (s Spec) bake() time.Duration { return time.Duration(s.BakeSeconds) * time.Second }

// normalize applies defaults and validates everything that needs no
// database; the target version is checked by Start.
func (s Spec) normalize() (Spec, error) {
	if s.BakeSeconds == 0 {
		s.BakeSeconds = DefaultBakeSeconds
	}
	switch {
	case s.TargetVersion < 0:
		return s, fieldErr("targetVersion", spec.CodeInvalid, "must not be negative")
	case len(s.Waves) == 0:
		return s, fieldErr("waves", spec.CodeRequired, "at least one wave is required")
	case len(s.Waves) > MaxWaves:
		return s, fieldErr("waves", spec.CodeInvalid, "at most %d waves", MaxWaves)
	case s.BakeSeconds < 0 || s.BakeSeconds > MaxBakeSeconds:
		return s, fieldErr("bakeSeconds", spec.CodeInvalid, "must be between 1 and %d", MaxBakeSeconds)
	case !(s.MaxNackRatio >= 0 && s.MaxNackRatio <= 1): // also rejects NaN
		return s, fieldErr("maxNackRatio", spec.CodeInvalid, "must be between 0 and 1")
	case s.MinNodes < 0:
		return s, fieldErr("minNodes", spec.CodeInvalid, "must not be negative")
	}
	waves := make([]Wave, len(s.Waves))
	for i, w := range s.Waves {
		f := fmt.Sprintf("waves[%d]", i)
		switch {
		case w.Groups != nil && w.Percent != 0:
			return s, fieldErr(f, spec.CodeInvalid, "set either groups or percent, not both")
		case w.Groups != nil:
			if len(w.Groups) == 0 {
				return s, fieldErr(f+".groups", spec.CodeInvalid, "must not be empty")
			}
			for j, g := range w.Groups {
				if g == "" {
					return s, fieldErr(fmt.Sprintf("%s.groups[%d]", f, j), spec.CodeInvalid, "must not be empty")
				}
			}
		case w.Percent < 1 || w.Percent > 100:
			if w.Percent == 0 {
				return s, fieldErr(f, spec.CodeRequired, "groups or percent is required")
			}
			return s, fieldErr(f+".percent", spec.CodeInvalid, "must be between 1 and 100")
		}
		waves[i] = Wave{Groups: append([]string(nil), w.Groups...), Percent: w.Percent}
	}
	s.Waves = waves
	return s, nil
}

func fieldErr(field, code, format string, args ...any) *spec.FieldError {
	return &spec.FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}

// member reports whether node is in a rollout whose waves up to and
// including wave have started.
func member(waves []Wave, wave int, node nodes.Status) bool {
	for i := 0; i <= wave && i < len(waves); i++ {
		w := waves[i]
		if w.Percent > 0 && Bucket(node.ID) < w.Percent {
			return true
		}
		for _, g := range w.Groups {
			if g == node.Group {
				return true
			}
		}
	}
	return false
}

// Bucket is the stable percentile (0-99) of a node id used by percent
// waves: fnv32a(id) % 100.
func Bucket(nodeID string) int {
	h := fnv.New32a()
	h.Write([]byte(nodeID)) //nolint:errcheck // hash writes never fail
	return int(h.Sum32() % 100)
}
