package authn_test

import (
	"flag"
	"testing"

	"github.com/portico-io/portico/internal/authn"
)

func TestFlagsKeyspacesClaim(t *testing.T) {
	t.Setenv("PORTICO_OIDC_KEYSPACES_CLAIM", "from-env")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := authn.RegisterFlags(fs)
	if err := fs.Parse([]string{"--oidc-issuer", "https://idp.example", "--oidc-jwks-url", "https://idp.example/jwks"}); err != nil {
		t.Fatal(err)
	}
	ok := func(string) error { return nil }
	c, err := f.JWT(ok)
	if err != nil || c.KeyspacesClaim != "from-env" {
		t.Fatalf("env: %+v %v", c, err)
	}
	if err := fs.Parse([]string{"--oidc-keyspaces-claim", "kv"}); err != nil {
		t.Fatal(err)
	}
	if c, err = f.JWT(ok); err != nil || c.KeyspacesClaim != "kv" {
		t.Fatalf("flag: %+v %v", c, err)
	}
}
