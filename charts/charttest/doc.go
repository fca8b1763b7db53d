// Package charttest checks the Helm chart charts/portico and the root
// Dockerfile statically: no cluster and no Docker engine are needed.
//
// Its tests run `helm lint` (default values and testdata/all-enabled.yaml)
// and `helm template` with default values, with every component and option
// enabled, and with each component disabled in turn; they decode every
// rendered document strictly into the Kubernetes API types (k8s.io/api, and
// prometheus-operator's ServiceMonitor), rejecting unknown and duplicate
// fields, and check the invariants the platform relies on: probes,
// resources and the restricted securityContext on every container, a
// writable volume under every directory a binary writes, a PDB per
// workload, HPAs, headless Services and volumeClaimTemplates where they
// belong, images taken from values, Service and ServiceMonitor ports that
// exist, wiring between components (xDS, extauthz, ratelimit addresses),
// and that disabling a component removes all its objects. The cache
// cluster (the default) is followed end to end: pods = primaries × (1 +
// replicasPerPrimary), kvnode's addresses and its "cache" CP keyspace, the
// bus port, failover settings and secret, the first-map hook Job and init
// containers, whose `cachectl topology init` arguments are turned into the
// map cachectl would publish (reshard.Initial), the NetworkPolicies around
// the bus, and the refusals (kvnode off, bad failover timings); standalone
// nodes when cluster.enabled=false. The Envoy
// bootstrap in the rendered ConfigMap is parsed strictly into the Envoy
// Bootstrap proto, validated, and held to envoy/bootstrap.CheckGateway;
// Envoy's preStop hook is run with bash against a loopback listener to see
// the drain request it sends. Names, port names and labels are validated as
// the API server would with the longest release name; values.schema.json
// must reject typos. Workload identity is followed in every render (tls_test.go): each
// Portico pod mounts its certificate Secret whole (no subPath) with
// PORTICO_TLS_* pointing into it, no container has PORTICO_INSECURE_PLAINTEXT,
// HTTP probes say HTTPS exactly on the TLS ports, ServiceMonitors verify
// those ports with the Secret's CA and a DNS name the certificate carries;
// by default the pre-install/pre-upgrade Job and the CronJob run
// `porticoctl certs k8s-sync` as service accounts whose Roles reach only the
// named Secrets (and the rendered Job is run, with porticoctl, against a
// stand-in API server enforcing the rendered Role); with cert-manager, the
// CA chain and one Certificate per workload with its SPIFFE URI; the Envoy
// bootstrap passes envoy/bootstrap.CheckXDSMutualTLS and its SDS files read
// the gateway's mounted Secret, the paths the control plane is given.
// The control plane's bootstrap admin token (admintoken_test.go) is
// mounted whole, read-only, with a mode authn.BootstrapToken accepts and
// the non-root process can read, as PORTICO_ADMIN_TOKEN_FILE, beside
// PORTICO_ADMIN_HOSTS naming the Service; the Secret is created by the
// certificate Job (or a token-only hook Job with cert-manager, run against
// its Role too) and never rendered, or brought by the user.
// The secure defaults (secure_defaults_test.go): one NetworkPolicy per
// component with exactly its peers and ports, the cache's AUTH with a
// generated password hashed into the namespaces file, generated passwords
// for the bundled Postgres and Redis wired from Secrets, and the refusal to
// expose the admin Service without controlplane.service.exposeAdmin.
// NOTES.txt is rendered and its curl bodies decoded and
// validated by the admin API's own spec package. The Dockerfile test checks a multi-stage build, CGO_ENABLED=0,
// -trimpath, a non-root distroless final stage, that every */cmd/* binary
// is built into the directory the chart runs them from, and that
// .dockerignore keeps the sources.
//
// Dashboards and alerts (monitoring_test.go): every dashboard JSON parses,
// with PromQL Prometheus's parser accepts; the alert rules pass
// Prometheus's own rule checker (model/rulefmt with the PromQL parser), each
// alert with a one-line runbook annotation; every metric a dashboard or rule
// names is registered by its component, probed in the registries the
// components fill when started in-process (registries_test.go: the control
// plane on a test database, hence Postgres from `make deps`); the dashboard
// ConfigMaps carry the sidecar's label and the files as they are, and the
// PrometheusRule renders only when the CRD's API is served, one group per
// enabled component.
//
// helm comes from PORTICO_HELM_BIN or <repo>/.run/bin/helm (`make helm`
// installs it). Without it the chart tests fail when CI is set and are
// skipped with a loud message otherwise.
package charttest
