package controlplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/portico-io/portico/controlplane/store"
)

// bootstrapAdminToken makes the admin token file on the first start (and
// prints the token once) and stores its hash, so the first operator can
// get in; later starts, and other replicas sharing the file, only make
// sure the hash is stored.
func bootstrapAdminToken(ctx context.Context, st *store.Store, file string, out io.Writer, log *slog.Logger) error {
	if file == "" {
		log.Warn("controlplane: no admin token file; operators need an operator certificate or an API token")
		return nil
	}
	tok, created, stored, err := st.BootstrapToken(ctx, file)
	if err != nil {
		return fmt.Errorf("controlplane: admin token: %w", err)
	}
	if created {
		if out == nil {
			out = os.Stdout
		}
		fmt.Fprintf(out, "controlplane: bootstrap admin token (shown once; also in %s):\n%s\n", file, tok.Plaintext)
	}
	if stored {
		log.Info("controlplane: bootstrap admin token registered", "id", tok.ID, "file", file)
	}
	return nil
}
