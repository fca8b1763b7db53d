package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// watchRetry bounds the wait before re-establishing a lost LISTEN connection.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// Watch delivers new head versions until ctx ends or the store closes, then
// closes the channel. The first value is the head when the watch started.
// Values increase strictly; the channel holds only the latest undelivered
// version (slow readers skip intermediate ones, which is fine because a
// version's config is complete). Versions come from NOTIFY on a dedicated
// connection, plus a poll of the head every PollInterval as a safety net
// for notifications lost while reconnecting. Seen versions' outbox rows are
// marked delivered.
func (s *Store) Watch(ctx context.Context) <-chan int64 {
	ch := make(chan int64, 1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel) //nolint:contextcheck // the watch also ends when the store closes
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(ch)
		defer stop()
		defer cancel()
		s.watch(ctx, ch)
	}()
	return ch
}

func (s *Store) watch(ctx context.Context, ch chan int64) {
	var (
		conn  *pgx.Conn
		last  int64 = -1
		retry       = watchRetryMin
	)
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	deliver := func(v int64) {
		if v <= last {
			return
		}
		last = v
		// Marked before the hand-off, so a reader holding v sees it delivered.
		if _, err := s.pool.Exec(ctx, `UPDATE controlplane.outbox SET delivered_at = now()
			WHERE delivered_at IS NULL AND version <= $1`, v); err != nil && ctx.Err() == nil {
			s.log.Warn("config watch: mark outbox delivered", "version", v, "err", err)
		}
		offer(ch, v)
	}
	for ctx.Err() == nil {
		if conn == nil {
			c, err := s.listen(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("config watch: listen failed, polling until it is back", "err", err, "retry_in", retry)
			} else {
				conn, retry = c, watchRetryMin
			}
		}
		// Read the head after (re)subscribing, so no version committed
		// between the two is missed.
		if head, err := s.Head(ctx); err == nil {
			deliver(head)
		} else if ctx.Err() == nil {
			s.log.Warn("config watch: read head", "err", err)
		}
		if conn == nil {
			if !sleep(ctx, min(retry, s.cfg.PollInterval)) {
				return
			}
			retry = min(2*retry, watchRetryMax)
			continue
		}
		// Drain notifications until the poll interval passes without one.
		for {
			wctx, cancel := context.WithTimeout(ctx, s.cfg.PollInterval)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) {
				break // poll the head
			}
			if err != nil {
				s.log.Warn("config watch: connection lost", "err", err)
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
				break
			}
			if v, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				deliver(v)
			}
		}
	}
}

// listen opens the watch's own connection (outside the pool, so a long
// LISTEN never starves writers) and subscribes.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// offer replaces any undelivered value in ch (capacity 1) with v. Only one
// goroutine sends on ch, so the loop ends after at most one drain.
func offer(ch chan int64, v int64) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
