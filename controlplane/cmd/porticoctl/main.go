// Command porticoctl is Portico's operator CLI (see controlplane/porticoctl).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/controlplane/porticoctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := porticoctl.Root(os.Stdout).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "porticoctl:", err)
		stop()
		os.Exit(1)
	}
}
