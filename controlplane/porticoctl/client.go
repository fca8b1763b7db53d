package porticoctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portico-io/portico/controlplane/adminclient"
)

// Defaults for the admin API connection: those of make run.
const (
	DefaultServer    = "https://localhost:18080"
	DefaultTokenFile = ".run/admin-token"
	DefaultCAFile    = ".run/pki/ca.crt"
)

// conn holds the connection flags shared by the config commands.
type conn struct {
	server, tokenFile, caFile, reason string
}

func (c *conn) flags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.server, "server", envOr("PORTICO_ADMIN_URL", DefaultServer), "admin API URL (env PORTICO_ADMIN_URL)")
	f.StringVar(&c.tokenFile, "token-file", envOr("PORTICO_ADMIN_TOKEN_FILE", DefaultTokenFile), "file holding the bearer token (env PORTICO_ADMIN_TOKEN_FILE)")
	f.StringVar(&c.caFile, "cacert", envOr("PORTICO_CA_FILE", DefaultCAFile), "CA bundle to trust; the system roots when the default file is absent (env PORTICO_CA_FILE)")
	f.StringVar(&c.reason, "reason", "", "reason recorded with the config version (X-Portico-Reason)")
}

// client builds the admin client from the flags.
func (c *conn) client() (*adminclient.Client, error) {
	tok, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("token: %w (make run writes .run/admin-token; or --token-file, PORTICO_ADMIN_TOKEN_FILE)", err)
	}
	ca := c.caFile
	if _, err := os.Stat(ca); errors.Is(err, fs.ErrNotExist) && ca == DefaultCAFile {
		ca = ""
	}
	return adminclient.New(adminclient.Config{Server: c.server, Token: strings.TrimSpace(string(tok)), CAFile: ca,
		Author: "porticoctl", Reason: c.reason})
}
