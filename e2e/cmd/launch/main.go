// Command launch is `make run`: it starts the Portico platform on this
// machine and stops it on Ctrl-C. See package launcher.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/e2e/launcher"
)

func main() {
	var cfg launcher.Config
	flag.StringVar(&cfg.Root, "root", ".", "repository root")
	flag.StringVar(&cfg.EnvoyBin, "envoy", "", "envoy binary (default: $ENVOY_BIN, then PATH)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := launcher.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "portico:", err)
		os.Exit(1)
	}
}
