// Command launch is `make run`: it starts the Portico platform on this
// machine, restarts a component that exits, and stops everything on
// Ctrl-C. `launch status` (`make status`) prints what a running launcher
// supervises. See package launcher.
//
//	launch [-root dir] [-envoy path] [-ratelimit-store redis|cachenode]   start and supervise the platform
//	launch [-root dir] status [-json]    each component's state, pid, restarts, ports
//
// status exits 0 while a launcher runs at root, 3 when none does.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/portico-io/portico/e2e/launcher"
)

func main() {
	var cfg launcher.Config
	flag.StringVar(&cfg.Root, "root", ".", "repository root")
	flag.StringVar(&cfg.EnvoyBin, "envoy", "", "envoy binary (default: $ENVOY_BIN, then PATH)")
	flag.StringVar(&cfg.RateLimitStore, "ratelimit-store", launcher.StoreRedis,
		"where ratelimitsvc keeps its buckets: "+launcher.StoreRedis+" (make deps's Redis) or "+launcher.StoreCache+" (the cache cluster)")
	flag.Parse()
	switch flag.Arg(0) {
	case "":
	case "status":
		os.Exit(status(cfg.Root, flag.Args()[1:]))
	default:
		fmt.Fprintf(os.Stderr, "portico: unknown command %q (launch [-root dir] [status [-json]])\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := launcher.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "portico:", err)
		os.Exit(1)
	}
}

// status prints the run's status and returns the exit code: 0 while a
// launcher runs, 3 when none does (as LSB's "program is not running"), 1
// on other errors.
func status(root string, args []string) int {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	asJSON := fs.Bool("json", false, "print the status file (launcher state checked) as JSON")
	_ = fs.Parse(args)
	var err error
	if *asJSON {
		var f *launcher.StatusFile
		if f, err = launcher.ReadStatus(root); err == nil {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(f)
			if err == nil && (f.Launcher.State == launcher.LauncherStopped || f.Launcher.State == launcher.LauncherGone) {
				err = launcher.ErrNotRunning
			}
		}
	} else {
		err = launcher.PrintStatus(os.Stdout, root, time.Now())
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, launcher.ErrNotRunning):
		if err != launcher.ErrNotRunning { //nolint:errorlint // bare: the output already says so
			fmt.Fprintln(os.Stderr, "portico:", err)
		}
		return 3
	default:
		fmt.Fprintln(os.Stderr, "portico:", err)
		return 1
	}
}
