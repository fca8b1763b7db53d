package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notification events.
const (
	EventFailure    = "FAILURE"
	EventDeadLetter = "DEAD_LETTER"
)

// Notification is one outbox row claimed for delivery. Attempt (1-based)
// fences its completion: a notifier whose visibility lease expired and
// whose row was claimed again cannot overwrite the newer attempt.
type Notification struct {
	ID          int64
	Event       string
	URL         string
	RunID       int64
	ScheduleID  int64
	Tenant      string
	ScheduledAt time.Time
	RunAttempt  int
	Error       *string
	Attempt     int
}

// ClaimNotifications takes up to n due PENDING outbox rows, hiding each
// for lease (a crashed notifier's rows come back after it) and counting
// the delivery attempt.
func (s *Store) ClaimNotifications(ctx context.Context, n int, lease time.Duration) ([]Notification, error) {
	rows, _ := s.pool.Query(ctx, `UPDATE scheduler.notification_outbox o
		SET attempt = o.attempt + 1, next_attempt_at = now() + $2 * interval '1 millisecond'
		WHERE o.id IN (SELECT id FROM scheduler.notification_outbox WHERE status = 'PENDING' AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING o.id, o.event, o.url, o.run_id, o.schedule_id, o.tenant, o.scheduled_at, o.run_attempt, o.error, o.attempt`,
		n, lease.Milliseconds())
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Notification, error) {
		var x Notification
		err := r.Scan(&x.ID, &x.Event, &x.URL, &x.RunID, &x.ScheduleID, &x.Tenant, &x.ScheduledAt, &x.RunAttempt, &x.Error, &x.Attempt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim notifications: %w", err)
	}
	return out, nil
}

// NotificationSent marks a delivered notification; ErrLeaseLost when the
// row was claimed again since (attempt moved on) or already ended.
func (s *Store) NotificationSent(ctx context.Context, id int64, attempt int) error {
	tag, err := s.pool.Exec(ctx, `UPDATE scheduler.notification_outbox SET status = 'SENT', finished_at = now(), last_error = NULL
		WHERE id = $1 AND attempt = $2 AND status = 'PENDING'`, id, attempt)
	return outboxFenced(tag.RowsAffected(), err)
}

// NotificationFailed records a failed delivery: PENDING again after retryIn,
// or FAILED when final.
func (s *Store) NotificationFailed(ctx context.Context, id int64, attempt int, retryIn time.Duration, final bool, msg string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE scheduler.notification_outbox
		SET status = CASE WHEN $3 THEN 'FAILED' ELSE 'PENDING' END, last_error = $4,
			next_attempt_at = now() + $5 * interval '1 millisecond', finished_at = CASE WHEN $3 THEN now() END
		WHERE id = $1 AND attempt = $2 AND status = 'PENDING'`, id, attempt, final, msg, retryIn.Milliseconds())
	return outboxFenced(tag.RowsAffected(), err)
}

func outboxFenced(n int64, err error) error {
	if err != nil {
		return fmt.Errorf("store: notification: %w", err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}
