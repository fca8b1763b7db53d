package tracing

import "errors"

// ErrConfig is a Config New cannot trace with.
var ErrConfig = errors.New("tracing: bad config")
