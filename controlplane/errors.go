package controlplane

import "errors"

// ErrConfig is a Config Run cannot serve with.
var ErrConfig = errors.New("controlplane: bad config")
