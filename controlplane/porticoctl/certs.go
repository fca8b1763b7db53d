package porticoctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

// DefaultPKIDir is where make run keeps the dev PKI.
const DefaultPKIDir = ".run/pki"

func certsCommand() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "certs",
		Short: "Create the platform CA and workload certificates (SPIFFE IDs)",
		Long: `certs manages a platform CA and the workload certificates it issues.

A workload needs three files: its certificate (URI SAN
spiffe://<trust-domain>/<role>/<name>), its key, and the CA bundle. Every
component reloads them when they change, so "renew" needs no restart.
Bring your own PKI (cert-manager, Vault, SPIRE) by writing the same files.
"k8s-sync" does the same with Kubernetes Secrets, from inside a pod.`,
	}
	c.PersistentFlags().StringVar(&dir, "dir", envOr("PORTICO_PKI_DIR", DefaultPKIDir), "directory of the CA (ca.crt, ca.key) (env PORTICO_PKI_DIR)")
	c.AddCommand(certsInit(&dir), certsIssue(&dir), certsRenew(&dir), certsK8sSync())
	return c
}

func certsInit(dir *string) *cobra.Command {
	var td string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "init",
		Short: "Create a platform CA (ECDSA P-256) for a trust domain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.NewCA(td, validity, time.Now())
			if err != nil {
				return err
			}
			if err := ca.Write(*dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created CA for spiffe://%s in %s (expires %s)\n", td, *dir, ca.Cert.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().StringVar(&td, "trust-domain", envOr("PORTICO_TRUST_DOMAIN", identity.DefaultTrustDomain), "SPIFFE trust domain (env PORTICO_TRUST_DOMAIN)")
	c.Flags().DurationVar(&validity, "validity", pki.DefaultCAValidity, "CA validity")
	return c
}

func certsIssue(dir *string) *cobra.Command {
	var role, name, out, file string
	var dns, ips []string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "issue --role ROLE --name NAME",
		Short: "Write a workload certificate and key signed by the CA",
		Example: `  porticoctl certs issue --role extauthz --name extauthz-0 --dns localhost --ip 127.0.0.1
  porticoctl certs issue --role operator --name alice --validity 8h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.LoadCA(*dir)
			if err != nil {
				return err
			}
			req := pki.Request{Role: identity.Role(role), Name: name, DNSNames: dns, Validity: validity}
			for _, s := range ips {
				ip := net.ParseIP(s)
				if ip == nil {
					return fmt.Errorf("--ip %q: not an IP address", s)
				}
				req.IPs = append(req.IPs, ip)
			}
			certPEM, keyPEM, err := ca.Issue(req, time.Now())
			if err != nil {
				return err
			}
			if out == "" {
				out = *dir
			}
			if file == "" {
				file = name
			}
			certFile, keyFile := filepath.Join(out, file+".crt"), filepath.Join(out, file+".key")
			if err := pki.WritePair(certFile, keyFile, certPEM, keyPEM); err != nil {
				return err
			}
			id, _ := identity.New(ca.TrustDomain, req.Role, name)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for %s\n", certFile, keyFile, id)
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", "", "workload role: "+roleNames())
	c.Flags().StringVar(&name, "name", "", "workload name (the last segment of its SPIFFE ID)")
	c.Flags().StringVar(&out, "out", "", "directory for the files (default --dir)")
	c.Flags().StringVar(&file, "file", "", "file name without extension (default --name)")
	c.Flags().StringSliceVar(&dns, "dns", nil, "DNS SANs, for clients that verify a host name")
	c.Flags().StringSliceVar(&ips, "ip", nil, "IP SANs, for clients that verify an address")
	c.Flags().DurationVar(&validity, "validity", pki.DefaultWorkloadValidity, "certificate validity")
	_ = c.MarkFlagRequired("role")
	_ = c.MarkFlagRequired("name")
	return c
}

func certsRenew(dir *string) *cobra.Command {
	var certs []string
	var fraction float64
	var watch time.Duration
	c := &cobra.Command{
		Use:   "renew [--cert FILE ...] [--watch INTERVAL]",
		Short: "Reissue certificates with less than --before of their lifetime left",
		Long: `renew reissues each certificate (default: every *.crt beside the CA but
ca.crt) whose remaining validity is below --before of its lifetime, keeping
its identity and SANs, with a new key beside it (<name>.key). With --watch
it keeps doing so until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.LoadCA(*dir)
			if err != nil {
				return err
			}
			pass := func() error {
				files := certs
				if len(files) == 0 {
					if files, err = workloadCerts(*dir); err != nil {
						return err
					}
				}
				var errs []error
				for _, f := range files {
					key := strings.TrimSuffix(f, ".crt") + ".key"
					renewed, err := ca.Renew(f, key, fraction, 0, time.Now())
					if err != nil {
						errs = append(errs, err)
					} else if renewed {
						fmt.Fprintf(cmd.OutOrStdout(), "renewed %s\n", f)
					}
				}
				return errors.Join(errs...)
			}
			if watch <= 0 {
				return pass()
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			t := time.NewTicker(watch)
			defer t.Stop()
			for {
				if err := pass(); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "renew:", err)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
			}
		},
	}
	c.Flags().StringSliceVar(&certs, "cert", nil, "certificate files to renew (key: the same name with .key)")
	c.Flags().Float64Var(&fraction, "before", pki.DefaultRenewFraction, "renew when less than this fraction of the lifetime is left")
	c.Flags().DurationVar(&watch, "watch", 0, "keep renewing at this interval")
	return c
}

// workloadCerts lists the workload certificates in dir: *.crt but ca.crt.
func workloadCerts(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range m {
		if filepath.Base(f) != pki.CACertFile {
			out = append(out, f)
		}
	}
	return out, nil
}

func roleNames() string {
	s := make([]string, len(identity.Roles))
	for i, r := range identity.Roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

func envOr(env, def string) string {
	if v, ok := os.LookupEnv(env); ok {
		return v
	}
	return def
}
