package bucket

import "errors"

// ErrBackend wraps every failure to reach or run the bucket store; callers
// apply each rule's fail mode.
var ErrBackend = errors.New("bucket: backend unavailable")
