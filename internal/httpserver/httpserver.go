// Package httpserver runs an HTTP server for the life of a context, with
// /metrics, /healthz and /readyz mounted beside the component's own routes,
// and a bounded graceful shutdown.
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portico-io/portico/internal/health"
)

// Config configures Serve. Zero values take the defaults.
type Config struct {
	// Handler serves everything not below; nil serves only the built-ins.
	Handler http.Handler
	// Gatherer backs /metrics; nil omits it.
	Gatherer prometheus.Gatherer
	// Health backs /healthz and /readyz; nil omits them.
	Health *health.Checks
	// TLS, when set, makes the server speak only TLS (HTTP/2 and HTTP/1.1
	// by ALPN); nil serves plaintext.
	TLS *tls.Config
	// ShutdownTimeout bounds graceful shutdown (default 10s).
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// Mux returns the mux Serve uses: built-ins plus cfg.Handler at "/".
func Mux(cfg Config) *http.ServeMux {
	mux := http.NewServeMux()
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	if cfg.Health != nil {
		cfg.Health.Register(mux)
	}
	if cfg.Handler != nil {
		mux.Handle("/", cfg.Handler)
	}
	return mux
}

// Serve serves on lis until ctx is done, then shuts down gracefully. It
// returns nil after a clean shutdown.
func Serve(ctx context.Context, lis net.Listener, cfg Config) error {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	srv := &http.Server{
		Handler:           Mux(cfg),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if cfg.Logger != nil {
		srv.ErrorLog = log.New(serverLog{cfg.Logger}, "", 0)
	}
	if cfg.TLS != nil {
		srv.TLSConfig = cfg.TLS
		lis = tls.NewListener(lis, cfg.TLS)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("httpserver: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("httpserver: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("httpserver: %w", err)
	}
	return nil
}

// serverLog sends net/http's own messages to slog: failed TLS handshakes
// (scanners, plaintext clients, refused certificates) at debug level, the
// rest (handler panics, accept errors) as warnings.
type serverLog struct{ l *slog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.Contains(msg, "TLS handshake error") {
		level = slog.LevelDebug
	}
	s.l.Log(context.Background(), level, "http server", "error", msg)
	return len(p), nil
}
