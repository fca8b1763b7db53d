package xdsclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHealthStaleness(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := NewHealth()
	h.timeNow = func() time.Time { return now }
	h.since = now
	h.StaleAfter = time.Minute
	h.subscribe([]string{typeA, typeB})
	ctx := context.Background()

	// Not yet in sync: ready until StaleAfter has passed.
	if err := h.Check(ctx); err != nil {
		t.Fatalf("fresh start: %v", err)
	}
	now = now.Add(61 * time.Second)
	if err := h.Check(ctx); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "since 2026-12-01T10:00:00Z: not yet in sync") {
		t.Fatalf("never synced after StaleAfter: %v", err)
	}
	h.inSync()
	if err := h.Check(ctx); err != nil {
		t.Fatalf("in sync: %v", err)
	}
	if since, why := h.Stale(); !since.IsZero() || why != nil {
		t.Fatalf("Stale() = %v, %v in sync", since, why)
	}

	// A control plane outage: stale from the first failure, ready until StaleAfter.
	down := now
	h.streamFailed(status.Error(codes.Unavailable, "connection refused"))
	now = now.Add(30 * time.Second)
	h.streamFailed(status.Error(codes.Unavailable, "connection refused again"))
	if err := h.Check(ctx); err != nil {
		t.Fatalf("short outage: %v", err)
	}
	now = now.Add(31 * time.Second)
	err := h.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "since "+down.Format(time.RFC3339)+": rpc error: code = Unavailable desc = connection refused again") {
		t.Fatalf("long outage: %v", err)
	}
	h.inSync()

	// A response over the receive limit: not ready at once.
	h.streamFailed(status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5878467 vs. 4194304)"))
	if err := h.Check(ctx); err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("oversized response: %v", err)
	}
	// Nor does a response of one type applied on the next stream (the
	// small types apply first on each reconnect, then the big one fails
	// again); every subscribed type applied since does.
	h.applied(typeA)
	if err := h.Check(ctx); err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("oversized response, then one type applied: %v", err)
	}
	h.applied(typeB)
	if err := h.Check(ctx); err != nil {
		t.Fatalf("after every type applied: %v", err)
	}
	// So does a stream that stays up for SyncGrace.
	h.streamFailed(status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5878467 vs. 4194304)"))
	h.applied(typeA)
	h.inSync()
	if err := h.Check(ctx); err != nil {
		t.Fatalf("after a stream outlived the grace: %v", err)
	}
	// An ordinary failure is cleared by the next applied response.
	h.streamFailed(status.Error(codes.Unavailable, "connection reset"))
	h.applied(typeA)
	if since, why := h.Stale(); !since.IsZero() || why != nil {
		t.Fatalf("Stale() = %v, %v after a reconnect applied", since, why)
	}

	// A NACK stays until that type applies, whatever else arrives.
	h.rejected(typeB, "7", errors.New("bad jwks"))
	h.applied(typeA)
	now = now.Add(2 * time.Minute)
	if err := h.Check(ctx); err == nil || !strings.Contains(err.Error(), "rejected test.B version 7: bad jwks") {
		t.Fatalf("NACK: %v", err)
	}
	h.applied(typeB)
	if err := h.Check(ctx); err != nil {
		t.Fatalf("NACKed type applied again: %v", err)
	}
	if h.failures[codes.ResourceExhausted] != 2 || h.failures[codes.Unavailable] != 3 {
		t.Fatalf("failures %v", h.failures)
	}
}

const typeA, typeB = "type.googleapis.com/test.A", "type.googleapis.com/test.B"
