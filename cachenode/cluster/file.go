package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/portico-io/portico/cachenode/internal/filepoll"
)

// Watcher loads a cluster config file into a State and re-reads it every
// Interval (default 2 s), as the namespaces file is: a changed file with a
// higher epoch replaces the map; a file that does not parse, or does not
// raise the epoch, is logged and ignored.
type Watcher struct {
	Path     string
	SelfID   string
	Interval time.Duration
	Logger   *slog.Logger
	// OnCheck, when set, is called after each check that saw a changed
	// file (a test signal).
	OnCheck func(applied bool, err error)

	state *State
	last  []byte
}

// Load reads the file once and returns the State it seeds.
func (w *Watcher) Load() (*State, error) {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		return nil, fmt.Errorf("cluster: read %s: %w", w.Path, err)
	}
	m, err := Parse(data, w.SelfID)
	if err != nil {
		return nil, err
	}
	w.state, w.last = NewState(m), data
	return w.state, nil
}

func (w *Watcher) check() (bool, error) {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		return false, fmt.Errorf("cluster: read %s: %w", w.Path, err)
	}
	if bytes.Equal(data, w.last) {
		return false, nil
	}
	w.last = data
	m, err := Parse(data, w.SelfID)
	if err != nil {
		return false, err
	}
	if err := w.state.Swap(m); err != nil {
		return false, err
	}
	return true, nil
}

// Run checks every Interval until ctx is done. Load must have succeeded.
func (w *Watcher) Run(ctx context.Context) error {
	filepoll.Run(ctx, w.Interval, w.check, func(applied bool, err error) {
		if err != nil && w.Logger != nil {
			w.Logger.Error("cluster config rejected; keeping the current slot map", "path", w.Path, "err", err)
		} else if applied && w.Logger != nil {
			w.Logger.Info("cluster config reloaded", "path", w.Path, "epoch", w.state.Load().Epoch)
		}
		if (applied || err != nil) && w.OnCheck != nil {
			w.OnCheck(applied, err)
		}
	})
	return nil
}
