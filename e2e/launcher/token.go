package launcher

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/pki"
)

// AdminTokenFile is the bootstrap admin token of a local run
// (ARCHITECTURE.md: .run/admin-token, PORTICO_ADMIN_TOKEN_FILE for CLIs).
func AdminTokenFile(root string) string { return filepath.Join(root, ".run", "admin-token") }

// AdminCurlrc is a curl config file (curl -K) with the run's CA and the
// admin token, so every admin example is one short command. It sets
// fail-with-body: an error answer is printed and curl exits non-zero, so a
// script (or `KEY=$(curl … | jq -r .key)`) stops at a refused call instead
// of carrying its error body on as data.
func AdminCurlrc(root string) string { return filepath.Join(root, ".run", "admin.curlrc") }

// ensureAdminToken makes the admin token on the first run (the control
// plane, given the same file, registers its hash) and the curl config
// beside it, both 0600. The token is not printed: it is in the file.
func ensureAdminToken(root string, out io.Writer) error {
	tok, created, err := authn.BootstrapToken(AdminTokenFile(root))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	ca, err := filepath.Abs(filepath.Join(PKIDir(root), pki.CACertFile))
	if err != nil {
		return err
	}
	rc := fmt.Sprintf("# curl -K %s: the local run's CA and admin token; a 4xx or 5xx exits non-zero\n"+
		"cacert = %q\nheader = \"Authorization: Bearer %s\"\nfail-with-body\n",
		AdminCurlrc(root), ca, tok.Plaintext)
	if err := os.WriteFile(AdminCurlrc(root), []byte(rc), 0o600); err != nil {
		return fmt.Errorf("admin curl config: %w", err)
	}
	if created {
		fmt.Fprintf(out, "portico: created the admin token in %s (curl -K %s ...)\n", AdminTokenFile(root), AdminCurlrc(root))
	}
	return nil
}
