package store

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRemoteLeaseSecrets: a remote lease is proven by its secret from its
// holder only; the row keeps the secret's hash, not the secret; a refusal
// says why (for logs) but reads as ErrLeaseLost; only the holder learns
// its run was cancelled; an in-process lease cannot be matched remotely.
func TestRemoteLeaseSecrets(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	spec := oneOffRetrySpec
	if _, err := s.pool.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 't1', $1::jsonb, true FROM generate_series(1, 4) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, tenant)
		SELECT id, now() - interval '1 second', 'QUEUED', 't1' FROM d`, spec); err != nil {
		t.Fatal(err)
	}
	const a, b = "spiffe://test/worker/a", "spiffe://test/worker/b"
	leases, err := s.ClaimRemote(ctx, "wa", a, 2, time.Minute, 2)
	if err != nil || len(leases) != 2 {
		t.Fatalf("ClaimRemote: %d leases, %v", len(leases), err)
	}
	l, other := leases[0], leases[1]
	if len(l.Secret) != LeaseSecretLen || bytes.Equal(l.Secret, other.Secret) || bytes.Equal(l.Secret, make([]byte, LeaseSecretLen)) {
		t.Fatalf("secrets %x and %x", l.Secret, other.Secret)
	}
	var (
		stored []byte
		holder *string
	)
	if err := s.pool.QueryRow(ctx, `SELECT lease_secret_hash, leased_by FROM scheduler.scheduled_execution WHERE id = $1`, l.RunID).
		Scan(&stored, &holder); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, leaseSecretHash(l.Secret)) || bytes.Contains(stored, l.Secret) || holder == nil || *holder != a {
		t.Fatalf("row keeps hash %x, leased_by %v", stored, holder)
	}

	refused := func(what string, err error, reason string) {
		t.Helper()
		nh, ok := errors.AsType[*NotHolderError](err)
		if !ok || nh.Reason != reason || !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("%s: %v, want a refusal (%s) that is ErrLeaseLost", what, err, reason)
		}
	}
	guess := bytes.Clone(l.Secret)
	guess[15]++
	refused("guessed secret", s.HeartbeatRemote(ctx, l.RunID, guess, a, time.Minute), RefusedToken)
	refused("another run's secret", s.HeartbeatRemote(ctx, l.RunID, other.Secret, a, time.Minute), RefusedToken)
	refused("right secret, other identity", s.HeartbeatRemote(ctx, l.RunID, l.Secret, b, time.Minute), RefusedIdentity)
	refused("right secret, no identity", s.HeartbeatRemote(ctx, l.RunID, l.Secret, "", time.Minute), RefusedIdentity)
	refused("no such run", s.HeartbeatRemote(ctx, 1<<40, l.Secret, a, time.Minute), RefusedToken)
	if _, err := s.LeasedRemote(ctx, l.RunID, l.Secret, b); err == nil {
		t.Fatal("LeasedRemote by another identity")
	}
	if err := s.HeartbeatRemote(ctx, l.RunID, l.Secret, a, time.Minute); err != nil {
		t.Fatalf("holder's heartbeat: %v", err)
	}
	got, err := s.LeasedRemote(ctx, l.RunID, l.Secret, a)
	if err != nil || got.Token != l.Token || got.Spec == nil {
		t.Fatalf("holder's LeasedRemote: %+v, %v", got, err)
	}

	// Cancelled: the holder is told; another identity is not.
	if _, err := s.CancelRun(ctx, other.RunID); err != nil {
		t.Fatal(err)
	}
	refused("cancelled run, other identity", s.HeartbeatRemote(ctx, other.RunID, other.Secret, b, time.Minute), RefusedIdentity)
	if err := s.HeartbeatRemote(ctx, other.RunID, other.Secret, a, time.Minute); !errors.Is(err, ErrCancelled) {
		t.Fatalf("holder's heartbeat of a cancelled run: %v", err)
	}

	// Without an identity (plaintext) the secret alone proves the lease.
	anon, err := s.ClaimRemote(ctx, "wp", "", 1, time.Minute, 2)
	if err != nil || len(anon) != 1 {
		t.Fatalf("anonymous claim: %v %v", anon, err)
	}
	if err := s.HeartbeatRemote(ctx, anon[0].RunID, anon[0].Secret, "", time.Minute); err != nil {
		t.Fatalf("anonymous heartbeat: %v", err)
	}
	refused("anonymous lease, an identity", s.HeartbeatRemote(ctx, anon[0].RunID, anon[0].Secret, a, time.Minute), RefusedIdentity)

	// An in-process lease has no secret a remote caller could present.
	local, err := s.Claim(ctx, "local", 1, time.Minute, 2)
	if err != nil || len(local) != 1 || local[0].Secret != nil {
		t.Fatalf("local claim: %v %v", local, err)
	}
	refused("in-process lease", s.HeartbeatRemote(ctx, local[0].RunID, make([]byte, LeaseSecretLen), "", time.Minute), RefusedToken)
	if err := s.Heartbeat(ctx, local[0].RunID, local[0].Token, time.Minute); err != nil {
		t.Fatalf("in-process heartbeat: %v", err)
	}

	// A run leased remotely and given back (its lease expired) is leased
	// in-process (claimPlainSQL) without the old secret or holder.
	if _, err := s.pool.Exec(ctx, `UPDATE scheduler.scheduled_execution SET status = 'QUEUED', lease_expires_at = NULL
		WHERE id = $1`, anon[0].RunID); err != nil {
		t.Fatal(err)
	}
	again, err := s.Claim(ctx, "local", 16, time.Minute, 2)
	if err != nil || !slices.ContainsFunc(again, func(l Lease) bool { return l.RunID == anon[0].RunID }) {
		t.Fatalf("re-lease in-process: %v %v", again, err)
	}
	var (
		hash []byte
		by   *string
	)
	if err := s.pool.QueryRow(ctx, `SELECT lease_secret_hash, leased_by FROM scheduler.scheduled_execution WHERE id = $1`,
		anon[0].RunID).Scan(&hash, &by); err != nil || hash != nil || by != nil {
		t.Fatalf("in-process lease kept secret hash %x and holder %v (%v)", hash, by, err)
	}
	refused("old secret of a run leased in-process since", s.HeartbeatRemote(ctx, anon[0].RunID, anon[0].Secret, "", time.Minute), RefusedToken)
}
