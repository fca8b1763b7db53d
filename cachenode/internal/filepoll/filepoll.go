// Package filepoll is the reload loop of the node's config files
// (namespaces, static cluster map): a file read on a ticker, applied when
// it changed, with the outcome reported. Polling, not inotify: it works
// the same for a Kubernetes ConfigMap volume, whose files are swapped by
// symlink.
package filepoll

import (
	"context"
	"time"
)

// DefaultInterval is the check interval when none is given.
const DefaultInterval = 2 * time.Second

// Run calls check every interval (DefaultInterval when ≤ 0) until ctx is
// done, and report with each result. check says whether it applied a
// changed file; an error means the file was rejected and the last good
// one stays in force.
func Run(ctx context.Context, interval time.Duration, check func() (applied bool, err error), report func(applied bool, err error)) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			applied, err := check()
			report(applied, err)
		}
	}
}
