package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/topology"
)

// Version is one stored version of the topology key.
type Version struct {
	Revision uint64
	Deleted  bool
	Spec     cluster.Spec
	Err      error // the document did not decode
}

var errCaughtUp = errors.New("caught up")

// History reads every stored version of the cluster's topology key, in
// revision order, from kvnode's watch history (a watch from revision 1)
// up to the revision stored when it is called. kvnode keeps the last
// 10000 events in memory: past that (or after a kvnode restart) the
// history starts at the current document.
func History(ctx context.Context, c *topology.Client) ([]Version, error) {
	cur, err := c.Load(ctx)
	if errors.Is(err, topology.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Version
	err = c.Watch(ctx, 1, func(u topology.Update) error {
		out = append(out, Version{Revision: u.Revision, Deleted: u.Deleted, Spec: u.Spec, Err: u.Err})
		if u.Revision >= cur.Revision {
			return errCaughtUp
		}
		return nil
	}, topology.WatchHooks{})
	if errors.Is(err, errCaughtUp) {
		return out, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return out, err
}

// CheckHistory verifies what failover promises about a topology history:
// every version is a valid map (so each slot has exactly one owner in it),
// and epochs strictly increase with the revision, so no two maps — and no
// two owners of a slot — ever share an epoch.
func CheckHistory(h []Version) error {
	var last uint64
	for i, v := range h {
		switch {
		case v.Deleted:
			return fmt.Errorf("revision %d: the topology was deleted", v.Revision)
		case v.Err != nil:
			return fmt.Errorf("revision %d: %v", v.Revision, v.Err)
		}
		if err := v.Spec.Validate(); err != nil {
			return fmt.Errorf("revision %d (epoch %d): %v", v.Revision, v.Spec.Epoch, err)
		}
		if i > 0 && v.Spec.Epoch <= last {
			return fmt.Errorf("revision %d: epoch %d does not rise above %d (revision %d)", v.Revision, v.Spec.Epoch, last, h[i-1].Revision)
		}
		last = v.Spec.Epoch
	}
	return nil
}
