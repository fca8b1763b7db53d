// Package testdeps gives integration tests the real services `make deps`
// starts: a fresh Postgres database per test and the shared Redis. For what
// the shared servers cannot give, it starts private ones from the same
// installed programs: redis-server processes (RedisServer), a Redis Cluster
// of them (RedisCluster) and a Postgres that accepts only verified TLS
// (PostgresTLS).
//
// When a service does not answer, the test is skipped with a message saying
// how to start it, except when the CI environment variable is set: then it
// fails, so a broken environment never passes as a green run.
package testdeps

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults match e2e/scripts/deps.sh.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/portico?sslmode=disable"
	DefaultRedisAddr   = "127.0.0.1:56379"
)

// dialTimeout bounds every probe so a missing service costs seconds, not minutes.
const dialTimeout = 5 * time.Second

// unavailable skips t, or fails it when running in CI.
func unavailable(t testing.TB, what, env string, err error) {
	t.Helper()
	skipOrFail(t, fmt.Sprintf("%s unavailable (%v); run `make deps` or set %s", what, err, env))
}

// skipOrFail skips t with msg, or fails it when running in CI.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Postgres creates an empty database on the server named by
// PORTICO_DATABASE_URL (default DefaultDatabaseURL) and returns a URL for it.
// The database is dropped, with any connections still open, when t ends.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv("PORTICO_DATABASE_URL")
	if base == "" {
		base = DefaultDatabaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdeps: PORTICO_DATABASE_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("testdeps: PORTICO_DATABASE_URL: %v", err)
	}
	cfg.ConnectTimeout = dialTimeout
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		unavailable(t, "postgres at "+u.Host, "PORTICO_DATABASE_URL", err)
	}
	defer admin.Close(context.Background())

	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "portico_t_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testdeps: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Errorf("testdeps: drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testdeps: drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// Redis returns the address in PORTICO_TEST_REDIS_ADDR (default
// DefaultRedisAddr) after checking that it answers PING. The server is
// shared: tests must use keys of their own.
func Redis(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("PORTICO_TEST_REDIS_ADDR")
	if addr == "" {
		addr = DefaultRedisAddr
	}
	if err := ping(addr); err != nil {
		unavailable(t, "redis at "+addr, "PORTICO_TEST_REDIS_ADDR", err)
	}
	return addr
}

// ping speaks just enough RESP (an inline PING) to avoid a client dependency.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected PING reply %q", strings.TrimSpace(line))
	}
	return nil
}
