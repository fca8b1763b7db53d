package membership

import "errors"

// ErrConflict wraps the refusals of a ring move that the cluster's current
// state does not allow (retrying later may succeed); kvnode answers them
// with 409. Its text is api.ErrConflict's, so translating one into the
// other at the edge leaves messages unchanged.
var ErrConflict = errors.New("kvnode: not possible in the cluster's current state")
