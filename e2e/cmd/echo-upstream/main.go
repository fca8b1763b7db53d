// Command echo-upstream is the demo upstream `make run` puts behind Envoy:
// it answers every request with a JSON echo of what it received, so the
// headers Portico adds (x-portico-consumer, x-request-id, ...) are visible.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/internal/httpserver"
)

func main() {
	addr := flag.String("addr", envOr("PORTICO_ECHO_ADDR", "127.0.0.1:18900"), "listen address")
	name := flag.String("name", envOr("PORTICO_ECHO_NAME", "echo"), "name reported in responses")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		slog.Error("echo-upstream: listen", "err", err)
		os.Exit(1)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"upstream": *name, "method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
			"host": r.Host, "headers": r.Header, "remoteAddr": r.RemoteAddr,
		})
	})
	slog.Info("echo-upstream: serving", "addr", lis.Addr().String())
	if err := httpserver.Serve(ctx, lis, httpserver.Config{Handler: h}); err != nil {
		slog.Error("echo-upstream", "err", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
