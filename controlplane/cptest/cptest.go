// Package cptest runs a real control plane inside a test: on its own
// ports, with a bootstrap admin token the test's admin calls present. The
// extauthz, ratelimitsvc and e2e tests drive their config through it.
package cptest

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
)

// Instance is a running control plane.
type Instance struct {
	Addrs controlplane.Addrs
	// Token is the bootstrap admin token.
	Token string
	stop  func()
}

// Start runs cfg until the test ends (or Stop). Zero addresses become
// loopback ports of the system's choice; without certificate files the
// servers are plaintext; the admin token file is the test's own.
func Start(t testing.TB, cfg controlplane.Config) *Instance {
	t.Helper()
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	if cfg.XDSAddr == "" {
		cfg.XDSAddr = "127.0.0.1:0"
	}
	cfg.InsecurePlaintext = !cfg.TLS.IsSet()
	if cfg.AdminTokenFile == "" {
		cfg.AdminTokenFile = filepath.Join(t.TempDir(), "admin-token")
	}
	cfg.Stdout = io.Discard
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	cfg.Ready = ready
	go func() { done <- controlplane.Run(ctx, cfg) }()
	in := &Instance{}
	select {
	case in.Addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("control plane exited: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("control plane not ready after 30s")
	}
	tok, err := os.ReadFile(cfg.AdminTokenFile)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	in.Token = strings.TrimSpace(string(tok))
	var stopped atomic.Bool
	in.stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
	}
	t.Cleanup(in.stop)
	return in
}

// Stop stops the control plane (again: a no-op).
func (in *Instance) Stop() { in.stop() }

// Authorize makes req an admin's.
func (in *Instance) Authorize(req *http.Request) { req.Header.Set("Authorization", "Bearer "+in.Token) }
