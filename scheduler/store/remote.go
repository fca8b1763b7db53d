package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/scheduler/jobspec"
)

// Remote leases (the gRPC worker API, issue 19). A network caller must not
// be able to act on a run by guessing its lease_token counter, nor act on
// another worker's run. So a remote claim gives each run a fresh
// LeaseSecretLen-byte secret from crypto/rand, returned once in Lease.Secret
// and stored only as its SHA-256 (lease_secret_hash), and records the
// caller's verified identity (leased_by). Heartbeats and completions by
// secret must present both. The counter stays the fencing token of every
// write: a completion first proves the secret (LeasedRemote, which returns
// the counter) and then writes under that counter, so a takeover in between
// still fences it off.
//
// Every claim sets both columns (NULL for in-process claims), so a remote
// caller can never match an in-process lease; every other change of
// lease_token (reap, cancel, REPLACE) also moves the run out of RUNNING,
// which the writes below require.
//
// In-process workers (scheduler/worker) keep fencing with the counter
// alone: their token never leaves the process that claimed it, so there is
// nothing for a caller to guess or replay, and their hot path (claims and
// batched completions by counter, SucceedMany) stays as measured.

// LeaseSecretLen is the length of a remote lease's secret: 128 bits.
const LeaseSecretLen = 16

// Why a remote call was refused (NotHolderError.Reason).
const (
	// RefusedToken: the secret is not the run's current one — guessed,
	// from a lease since taken over, or there is no such run.
	RefusedToken = "token"
	// RefusedIdentity: the run's current secret, from an identity other
	// than the one that leased it.
	RefusedIdentity = "identity"
)

// leaseSecretHash is what the row keeps of a secret. Comparing hashes in
// SQL is not constant-time, but what it could leak is about the hash of an
// unknown 128-bit value, which says nothing usable about the secret.
func leaseSecretHash(secret []byte) []byte {
	h := sha256.Sum256(secret)
	return h[:]
}

// holderArg is leased_by for holder: NULL without a verified identity.
func holderArg(holder string) *string {
	if holder == "" {
		return nil
	}
	return &holder
}

// ClaimRemote is Claim for a remote worker: each lease carries a new
// Secret, and holder (the caller's verified identity; "" without one, e.g.
// plaintext) is recorded as the run's leased_by. Only holder presenting
// Secret may heartbeat or complete the run (HeartbeatRemote, LeasedRemote).
func (s *Store) ClaimRemote(ctx context.Context, workerID, holder string, n int, ttl time.Duration, maxRank int) ([]Lease, error) {
	secrets := make([][]byte, n)
	hashes := make([][]byte, n)
	byHash := make(map[string][]byte, n)
	for i := range secrets {
		secrets[i] = make([]byte, LeaseSecretLen)
		if _, err := rand.Read(secrets[i]); err != nil {
			return nil, fmt.Errorf("store: claim: %w", err)
		}
		hashes[i] = leaseSecretHash(secrets[i])
		byHash[string(hashes[i])] = secrets[i]
	}
	leases, err := s.claim(ctx, workerID, n, ttl, maxRank, nil, hashes, holderArg(holder))
	if err != nil {
		return nil, err
	}
	for i := range leases {
		secret, ok := byHash[string(leases[i].secretHash)]
		if !ok { // unreachable: claimSQL hands out elements of hashes
			return nil, fmt.Errorf("store: claim: run %d leased without a secret", leases[i].RunID)
		}
		leases[i].Secret = secret
	}
	return leases, nil
}

// remoteHeld is the condition of every write and read by secret: $2 the
// secret's hash, $3 the holder (NULL matches a lease taken without an
// identity). By primary key (see leaseHeld).
const remoteHeld = `lease_secret_hash = $2 AND leased_by IS NOT DISTINCT FROM $3::text AND ` + leaseHeld

const heartbeatRemoteSQL = `UPDATE scheduler.scheduled_execution
	SET lease_expires_at = now() + $4 * interval '1 millisecond', updated_at = now()
	WHERE id = $1 AND ` + remoteHeld

// HeartbeatRemote extends the lease holder took with secret. Errors: a
// *NotHolderError (matches ErrLeaseLost) when the secret is not current or
// holder did not take the lease; ErrCancelled when the holder's run was
// cancelled; ErrLeaseLost when the holder's lease ended otherwise.
func (s *Store) HeartbeatRemote(ctx context.Context, runID int64, secret []byte, holder string, ttl time.Duration) error {
	hash, who := leaseSecretHash(secret), holderArg(holder)
	tag, err := s.pool.Exec(ctx, heartbeatRemoteSQL, runID, hash, who, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("store: heartbeat: %w", err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return s.refusedRemote(ctx, "heartbeat", runID, hash, who)
}

// LeasedRemote returns the lease holder took with secret on a RUNNING run,
// its Token the counter that fences the completion's write; errors as
// HeartbeatRemote.
func (s *Store) LeasedRemote(ctx context.Context, runID int64, secret []byte, holder string) (Lease, error) {
	var (
		l   Lease
		raw []byte
	)
	hash, who := leaseSecretHash(secret), holderArg(holder)
	err := s.pool.QueryRow(ctx, `SELECT e.id, e.schedule_id, e.scheduled_at, e.attempt, e.lease_token, d.spec
		FROM scheduler.scheduled_execution e JOIN scheduler.schedule_details d ON d.id = e.schedule_id
		WHERE e.id = $1 AND e.lease_secret_hash = $2 AND e.leased_by IS NOT DISTINCT FROM $3::text AND e.`+leaseHeld,
		runID, hash, who).Scan(&l.RunID, &l.ScheduleID, &l.ScheduledAt, &l.Attempt, &l.Token, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, s.refusedRemote(ctx, "leased", runID, hash, who)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("store: leased: %w", err)
	}
	spec, err := jobspec.DecodeStored(raw)
	if err != nil {
		return Lease{}, fmt.Errorf("store: leased: job %d: %w", l.ScheduleID, err)
	}
	l.Spec = spec
	return l, nil
}

// refusedRemote says why a call by secret matched nothing. Only a caller
// that proved the lease (right secret, right holder) learns that its run
// was cancelled; everyone else gets a *NotHolderError.
func (s *Store) refusedRemote(ctx context.Context, op string, runID int64, hash []byte, holder *string) error {
	var (
		status          string
		secretOK, whoOK bool
	)
	err := s.pool.QueryRow(ctx, `SELECT status, coalesce(lease_secret_hash = $2, false), leased_by IS NOT DISTINCT FROM $3::text
		FROM scheduler.scheduled_execution WHERE id = $1`, runID, hash, holder).Scan(&status, &secretOK, &whoOK)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &NotHolderError{Reason: RefusedToken}
	case err != nil:
		return fmt.Errorf("store: %s: %w", op, err)
	case !secretOK:
		return &NotHolderError{Reason: RefusedToken}
	case !whoOK:
		return &NotHolderError{Reason: RefusedIdentity}
	case status == StatusCancelled:
		return ErrCancelled
	}
	return ErrLeaseLost
}
