package bootstrap

import (
	"os"
	"strings"
	"testing"
)

func gatewayYAML(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestParseRejectsUnknownFieldsAndInvalidValues(t *testing.T) {
	base := gatewayYAML(t)
	for name, doc := range map[string]string{
		"unknown field":    strings.Replace(base, "node:\n", "node:\n  bogus: 1\n", 1),
		"unknown Any type": strings.Replace(base, "v3.FixedHeapConfig", "v3.NoSuchConfig", 1),
		"invalid port":     strings.Replace(base, "port_value: 18000", "port_value: 700000", 1),
		"not yaml":         "node: [",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestCheckGatewayFindsEachBrokenRule(t *testing.T) {
	base := gatewayYAML(t)
	b, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := CheckGateway(b)
	if err != nil {
		t.Fatalf("envoy/bootstrap.yaml: %v", err)
	}
	if lim.MaxHeapBytes != 1<<30 || lim.MaxDownstreamConns != 50000 || lim.StatsPort != 19001 {
		t.Errorf("limits = %+v", lim)
	}

	extauthzStatic := `    - name: extauthz
      type: STATIC
      connect_timeout: 0.25s
`
	for name, tc := range map[string]struct{ old, new, want string }{
		"wrong node cluster":     {"cluster: portico-gateway", "cluster: other", "node ="},
		"no group":               {"portico.group: default", "other: x", "portico.group"},
		"no reconnect back-off":  {"retry_back_off: {base_interval: 0.5s, max_interval: 15s}", "num_retries: 1", "back-off"},
		"admin on all addresses": {"socket_address: {address: 127.0.0.1, port_value: 9901}", "socket_address: {address: 0.0.0.0, port_value: 9901}", "admin ="},
		"static extauthz":        {"  clusters:\n", "  clusters:\n" + extauthzStatic, `static cluster "extauthz"`},
		"slow connect":           {"connect_timeout: 0.5s", "connect_timeout: 5s", "connect_timeout"},
		"no circuit breakers":    {"      circuit_breakers:\n        thresholds:\n          - priority: DEFAULT\n            max_connections: 8\n            max_pending_requests: 16\n            max_requests: 64\n            max_retries: 3\n", "", "circuit breakers"},
		"no heap monitor":        {"envoy.resource_monitors.fixed_heap\n      typed_config", "envoy.resource_monitors.fixed_heap_x\n      typed_config", "heap limit"},
		"no connection limit":    {"max_active_downstream_connections: 50000", "max_active_downstream_connections: 0", "connection limit"},
		"no stop on heap":        {"envoy.overload_actions.stop_accepting_requests", "envoy.overload_actions.stop_accepting_connections", "stop_accepting_requests"},
		"prometheus elsewhere":   {"match: {path: /stats/prometheus}", "match: {path: /metrics}", "/stats/prometheus"},
		"ready not to admin":     {"match: {path: /ready}\n                          route: {cluster: envoy_admin", "match: {path: /ready}\n                          route: {cluster: xds_cluster", "/ready"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(base, tc.old, tc.new, 1)
			if doc == base {
				t.Fatalf("mutation %q not applied", tc.old)
			}
			b, err := Parse([]byte(doc))
			if err != nil {
				t.Fatalf("mutated bootstrap does not parse: %v", err)
			}
			_, err = CheckGateway(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckGateway = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
