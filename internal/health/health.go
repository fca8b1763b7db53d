// Package health serves liveness (/healthz) and readiness (/readyz).
// Liveness says the process is serving; readiness runs every registered
// check (each with a short deadline) and is 200 only if all pass.
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Check reports whether one dependency or state is ready.
type Check func(ctx context.Context) error

// Checks is a set of named readiness checks, safe for concurrent use.
type Checks struct {
	mu      sync.RWMutex
	checks  map[string]Check
	Timeout time.Duration // per check; default 2s
}

// New returns an empty set.
func New() *Checks { return &Checks{checks: map[string]Check{}} }

// Add registers (or replaces) the named check.
func (c *Checks) Add(name string, fn Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[name] = fn
}

// Run runs every check and returns the failures by name.
func (c *Checks) Run(ctx context.Context) map[string]string {
	// The checks are copied under the lock: Add may run while checks do
	// (a component registering one as it starts while /readyz is asked).
	c.mu.RLock()
	names := make([]string, 0, len(c.checks))
	checks := make(map[string]Check, len(c.checks))
	for n, fn := range c.checks {
		names = append(names, n)
		checks[n] = fn
	}
	c.mu.RUnlock()
	sort.Strings(names)
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	failed := map[string]string{}
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		if err := checks[n](cctx); err != nil {
			failed[n] = err.Error()
		}
		cancel()
	}
	return failed
}

// Register mounts /healthz and /readyz on mux.
func (c *Checks) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		failed := c.Run(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "unready", "failed": failed})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ready"})
	})
}
