// Package e2e holds Portico's whole-stack tests; the launcher `make run`
// uses lives in e2e/launcher.
//
// What runs always (Postgres and Redis from `make deps`; no Envoy): every
// component in-process on loopback with random ports, configured only
// through the admin API, over mutual TLS as in production.
//
// The config path:
//   - TestFullConfigPath: admin API → Postgres → snapshot → xDS → extauthz
//     and ratelimitsvc ACK; the route configuration compiled for a
//     portico-gateway node is fetched over ADS, and the ext_authz context
//     extensions and rate-limit actions of the route a request matches are
//     turned into the CheckRequest and RateLimitRequest Envoy would send
//     (gatewayView). Their answers, revocations and key deletions taking
//     effect on the next Check, and a NACKed JWT provider visible in
//     /admin/v1/nodes while extauthz keeps its last good policy.
//   - TestConfigPathOverMutualTLS, TestRotationUnderLoad: xDS only for
//     platform certificates, verified identities in the node view; every
//     certificate rewritten under load without a failed call.
//   - TestPostgresVerifyFull: the control plane and the scheduler reach
//     Postgres with sslmode=verify-full.
//   - TestDeltaNodesCurrentAfterRouteChange, TestRolloutWithDeltaNodes: delta
//     xDS clients in the node view and in rollout waves.
//   - TestSecurityChannelBypassesRollouts, TestRollbackKeepsRevocations:
//     credentials and revocations follow the head whatever a rollout or a
//     rollback does.
//   - TestImportedKeyAuthenticates, TestPolicyOver4MiBReachesExtauthz,
//     TestUnreceivablePolicyIsLoud: imported key hashes, policies over gRPC's
//     default message size, and a policy a client cannot receive turning it
//     not ready.
//
// The data path as the gateway would drive it:
//   - TestCanaryWeights, TestOutlierEjection, TestFailurePercentageEjection:
//     proxyless grpc-go clients (real xDS clients) route through weighted
//     clusters created by the admin API and eject failing backends.
//   - TestRateLimitHeadersOnce, TestRateLimitFailModeWhenServiceDown: the
//     X-RateLimit-* headers, and fail-open/fail-closed as compiled.
//   - TestTraceThroughExtauthzAndRateLimit, TestTracingOffExportsNothing:
//     OpenTelemetry spans across extauthz and ratelimitsvc, and none when
//     tracing is off.
//
// What needs a live Envoy (ENVOY_BIN or envoy on PATH; skipped with a
// message saying so otherwise): TestLiveEnvoy, TestLiveEnvoyStack,
// TestLiveEnvoyHTTPSAndUpstreamMTLS and TestLiveEnvoyRedisProxy send
// traffic through Envoy's listeners.
//
// Benchmarks: BenchmarkKeyChangeAtScale (a million API keys) and
// BenchmarkMutualTLSCost.
package e2e
