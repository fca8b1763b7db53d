package porticoctl

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portico-io/portico/controlplane/porticoctl/certsync"
	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

func certsK8sSync() *cobra.Command {
	var (
		namespace, prefix, td, saDir string
		tokenSecret                  string
		workloads, dns               []string
		labels                       map[string]string
		validity, caValidity         time.Duration
		fraction                     float64
	)
	c := &cobra.Command{
		Use:   "k8s-sync --secret-prefix PREFIX --workloads ROLE:NAME,... [--admin-token-secret NAME]",
		Short: "Keep workload certificates in Kubernetes Secrets, issued and renewed from a CA Secret",
		Long: `k8s-sync runs inside a pod, as its service account, and keeps one Secret
per workload (<prefix><name>: tls.crt, tls.key, ca.crt) issued from the
platform CA kept in <prefix>ca, which it creates once and never replaces.
A workload Secret is (re)issued when missing, for another identity, CA or
DNS names, or once less than --before of its lifetime is left; otherwise it
is left alone. Pods mount the Secrets as volumes: the kubelet updates the
files and the binaries reload them, with no restart.

With --admin-token-secret NAME it also keeps the control plane's bootstrap
admin token in the Secret NAME (key "token"): like the CA, created once
with a new ptk_ API token and never replaced; an existing one must hold a
well-formed token. Without --workloads (and --secret-prefix) it keeps only
that Secret, for installs whose certificates come from elsewhere.

It needs get, update and patch on those Secrets, get on the token Secret,
and create on Secrets (the Helm chart's Role grants exactly that).`,
		Example: `  porticoctl certs k8s-sync --secret-prefix portico-tls- --trust-domain portico.local \
    --workloads gateway:envoy,controlplane:controlplane \
    --dns controlplane=portico-controlplane.portico.svc,portico-controlplane.portico.svc.cluster.local \
    --admin-token-secret portico-tls-admin-token
  porticoctl certs k8s-sync --admin-token-secret portico-tls-admin-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkSyncFlags(prefix, workloads, tokenSecret); err != nil {
				return err
			}
			ws, err := parseWorkloads(workloads, dns)
			if err != nil {
				return err
			}
			kcfg, err := kubesecret.InCluster(saDir, namespace)
			if err != nil {
				return err
			}
			client, err := kubesecret.New(kcfg)
			if err != nil {
				return err
			}
			var results []certsync.Result
			var errs []error
			if len(ws) > 0 {
				res, err := certsync.Sync(cmd.Context(), client, certsync.Config{
					TrustDomain: td, SecretPrefix: prefix, Workloads: ws,
					Validity: validity, RenewFraction: fraction, CAValidity: caValidity, Labels: labels,
				})
				results, errs = res, append(errs, err)
			}
			if tokenSecret != "" {
				r, err := certsync.EnsureAdminToken(cmd.Context(), client, tokenSecret, labels)
				if err == nil {
					results = append(results, r)
				}
				errs = append(errs, err)
			}
			for _, r := range results {
				line := fmt.Sprintf("%s %s/%s (%s", r.Action, client.Namespace(), r.Secret, r.ID)
				if !r.NotAfter.IsZero() {
					line += ", expires " + r.NotAfter.UTC().Format(time.RFC3339)
				}
				line += ")"
				if r.Reason != "" {
					line += ": " + r.Reason
				}
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return errors.Join(errs...)
		},
	}
	f := c.Flags()
	f.StringVar(&namespace, "namespace", "", "namespace of the Secrets (default: the service account's)")
	f.StringVar(&prefix, "secret-prefix", "", "Secret names: <prefix>ca for the CA, <prefix><name> per workload")
	f.StringVar(&td, "trust-domain", envOr("PORTICO_TRUST_DOMAIN", identity.DefaultTrustDomain), "SPIFFE trust domain (env PORTICO_TRUST_DOMAIN)")
	f.StringSliceVar(&workloads, "workloads", nil, "ROLE:NAME of each workload, comma-separated (roles: "+roleNames()+")")
	f.StringArrayVar(&dns, "dns", nil, "NAME=HOST[,HOST...]: DNS SANs of workload NAME, for clients that verify host names (repeatable)")
	f.StringToStringVar(&labels, "label", nil, "labels of the Secrets it creates, KEY=VALUE,...")
	f.DurationVar(&validity, "validity", pki.DefaultWorkloadValidity, "workload certificate validity")
	f.Float64Var(&fraction, "before", pki.DefaultRenewFraction, "reissue when less than this fraction of the lifetime is left")
	f.DurationVar(&caValidity, "ca-validity", pki.DefaultCAValidity, "validity of a CA it creates")
	f.StringVar(&tokenSecret, "admin-token-secret", "", "also keep the control plane's bootstrap admin token in this Secret (key \"token\"): created once, never replaced")
	f.StringVar(&saDir, "service-account-dir", kubesecret.DefaultServiceAccountDir, "where the pod's service account token, ca.crt and namespace are")
	_ = f.MarkHidden("service-account-dir")
	return c
}

// checkSyncFlags: certificates need a prefix and workloads; the admin
// token alone needs neither; something must be asked for, and the token
// Secret must not be one of the certificate Secrets.
func checkSyncFlags(prefix string, workloads []string, tokenSecret string) error {
	switch {
	case len(workloads) == 0 && tokenSecret == "":
		return errors.New("nothing to keep: give --secret-prefix and --workloads, --admin-token-secret, or both")
	case len(workloads) > 0 && prefix == "":
		return errors.New("--workloads needs --secret-prefix")
	case len(workloads) == 0 && prefix != "":
		return errors.New("--secret-prefix needs --workloads")
	}
	if tokenSecret == "" || prefix == "" {
		return nil
	}
	if tokenSecret == prefix+certsync.CAName {
		return fmt.Errorf("--admin-token-secret %s is the CA's Secret", tokenSecret)
	}
	for _, w := range workloads {
		if _, name, _ := strings.Cut(strings.TrimSpace(w), ":"); prefix+name == tokenSecret {
			return fmt.Errorf("--admin-token-secret %s is the certificate Secret of workload %s", tokenSecret, name)
		}
	}
	return nil
}

// parseWorkloads reads --workloads ROLE:NAME entries and --dns NAME=HOSTS.
func parseWorkloads(specs, dns []string) ([]certsync.Workload, error) {
	var out []certsync.Workload
	index := map[string]int{}
	for _, s := range specs {
		role, name, ok := strings.Cut(strings.TrimSpace(s), ":")
		if !ok || role == "" || name == "" {
			return nil, fmt.Errorf("--workloads %q: want ROLE:NAME", s)
		}
		if !identity.Role(role).Valid() {
			return nil, fmt.Errorf("--workloads %q: unknown role %q (roles: %s)", s, role, roleNames())
		}
		index[name] = len(out)
		out = append(out, certsync.Workload{Role: identity.Role(role), Name: name})
	}
	for _, d := range dns {
		name, hosts, ok := strings.Cut(d, "=")
		i, known := index[name]
		if !ok || !known || hosts == "" {
			return nil, fmt.Errorf("--dns %q: want NAME=HOST[,HOST...] for a NAME of --workloads", d)
		}
		for _, h := range strings.Split(hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				out[i].DNSNames = append(out[i].DNSNames, h)
			}
		}
	}
	return out, nil
}
