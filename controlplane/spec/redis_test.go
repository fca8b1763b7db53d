package spec_test

import (
	"errors"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

func TestRedisProxyValidation(t *testing.T) {
	const seeds = `"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}]}`
	cases := []struct {
		name  string
		body  string
		field string // "" = valid
		code  string
	}{
		{"minimal", `{"name":"cache","listen":{"port":6380},` + seeds + `}`, "", ""},
		{"everything", `{"name":"cache","listen":{"address":"0.0.0.0","port":6380},"cluster":{"seeds":[` +
			`{"address":"127.0.0.1","port":7000},{"address":"127.0.0.1","port":7001},{"address":"cachenode-0.cachenode","port":7000}],` +
			`"clusterRefreshRate":"5s","clusterRefreshTimeout":"3s","redirectRefreshInterval":"1s","redirectRefreshThreshold":0,"connectTimeout":"250ms"},` +
			`"opTimeout":"1s","readPolicy":"preferReplica","maxUpstreamUnknownConnections":10,` +
			`"downstreamAuthPassword":{"file":"/etc/redis/password"},` +
			`"prefixRoutes":[{"prefix":"a:"},{"prefix":"b:","removePrefix":true,"redisProxy":"other"}]}`, "", ""},
		{"every read policy", `{"name":"c","listen":{"port":1},` + seeds + `,"readPolicy":"any"}`, "", ""},
		{"no name", `{"listen":{"port":6380},` + seeds + `}`, "name", spec.CodeRequired},
		{"bad name", `{"name":"Cache","listen":{"port":6380},` + seeds + `}`, "name", spec.CodeInvalid},
		{"no port", `{"name":"c",` + seeds + `}`, "listen.port", spec.CodeInvalid},
		{"port too big", `{"name":"c","listen":{"port":70000},` + seeds + `}`, "listen.port", spec.CodeInvalid},
		{"negative port", `{"name":"c","listen":{"port":-1},` + seeds + `}`, "listen.port", spec.CodeInvalid},
		{"listen hostname", `{"name":"c","listen":{"address":"localhost","port":6380},` + seeds + `}`, "listen.address", spec.CodeInvalid},
		{"no seeds", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[]}}`, "cluster.seeds", spec.CodeRequired},
		{"no cluster", `{"name":"c","listen":{"port":6380}}`, "cluster.seeds", spec.CodeRequired},
		{"seed without address", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"port":7000}]}}`, "cluster.seeds[0].address", spec.CodeRequired},
		{"seed bad address", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"a b","port":7000}]}}`, "cluster.seeds[0].address", spec.CodeInvalid},
		{"seed bad port", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":0}]}}`, "cluster.seeds[0].port", spec.CodeInvalid},
		{"duplicate seed", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000},{"address":"127.0.0.1","port":7000}]}}`, "cluster.seeds[1]", spec.CodeConflict},
		{"malformed duration", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"clusterRefreshRate":"soon"}}`, "cluster.clusterRefreshRate", spec.CodeInvalid},
		{"duration as number", `{"name":"c","listen":{"port":6380},` + seeds + `,"opTimeout":5}`, "opTimeout", spec.CodeInvalid},
		{"negative refresh", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"clusterRefreshRate":"-1s"}}`, "cluster.clusterRefreshRate", spec.CodeInvalid},
		{"sub-millisecond timeout", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"clusterRefreshTimeout":"10us"}}`, "cluster.clusterRefreshTimeout", spec.CodeInvalid},
		{"fractional millisecond", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"redirectRefreshInterval":"1500us"}}`, "cluster.redirectRefreshInterval", spec.CodeInvalid},
		{"huge op timeout", `{"name":"c","listen":{"port":6380},` + seeds + `,"opTimeout":"2h"}`, "opTimeout", spec.CodeInvalid},
		{"negative threshold", `{"name":"c","listen":{"port":6380},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"redirectRefreshThreshold":-1}}`, "cluster.redirectRefreshThreshold", spec.CodeInvalid},
		{"unknown read policy", `{"name":"c","listen":{"port":6380},` + seeds + `,"readPolicy":"MASTER"}`, "readPolicy", spec.CodeInvalid},
		{"relative password file", `{"name":"c","listen":{"port":6380},` + seeds + `,"downstreamAuthPassword":{"file":"password"}}`, "downstreamAuthPassword.file", spec.CodeInvalid},
		{"empty password file", `{"name":"c","listen":{"port":6380},` + seeds + `,"downstreamAuthPassword":{}}`, "downstreamAuthPassword.file", spec.CodeRequired},
		{"inline password", `{"name":"c","listen":{"port":6380},` + seeds + `,"downstreamAuthPassword":{"secret":"hunter2"}}`, "secret", spec.CodeInvalid},
		{"empty prefix", `{"name":"c","listen":{"port":6380},` + seeds + `,"prefixRoutes":[{"prefix":""}]}`, "prefixRoutes[0].prefix", spec.CodeRequired},
		{"duplicate prefix", `{"name":"c","listen":{"port":6380},` + seeds + `,"prefixRoutes":[{"prefix":"a"},{"prefix":"a","removePrefix":true}]}`, "prefixRoutes[1].prefix", spec.CodeConflict},
		{"bad route target", `{"name":"c","listen":{"port":6380},` + seeds + `,"prefixRoutes":[{"prefix":"a","redisProxy":"No"}]}`, "prefixRoutes[0].redisProxy", spec.CodeInvalid},
		{"unknown field", `{"name":"c","listen":{"port":6380},` + seeds + `,"mode":"cluster"}`, "mode", spec.CodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Decode(spec.KindRedisProxy, []byte(tc.body))
			if tc.field == "" && tc.code == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("want a FieldError, got %v", err)
			}
			if (tc.field != "" && fe.Field != tc.field) || fe.Code != tc.code {
				t.Fatalf("got field %q code %q (%v), want field %q code %q", fe.Field, fe.Code, fe, tc.field, tc.code)
			}
		})
	}
}

func TestRedisProxyConfigValidation(t *testing.T) {
	proxy := func(name string, port uint32, routes ...spec.RedisPrefixRoute) *spec.RedisProxy {
		return &spec.RedisProxy{Name: name, Listen: spec.RedisListen{Port: port},
			Cluster:      spec.RedisCluster{Seeds: []spec.RedisSeed{{Address: "127.0.0.1", Port: 7000}}},
			PrefixRoutes: routes}
	}
	cases := []struct {
		name  string
		build func(c *spec.Config)
		field string // "" = valid
		code  string
	}{
		{"two proxies", func(c *spec.Config) {
			c.RedisProxies["a"] = proxy("a", 6380, spec.RedisPrefixRoute{Prefix: "x:", RedisProxy: "b"})
			c.RedisProxies["b"] = proxy("b", 6381)
		}, "", ""},
		{"same port as another proxy", func(c *spec.Config) {
			c.RedisProxies["a"] = proxy("a", 6380)
			c.RedisProxies["b"] = proxy("b", 6380)
		}, "redis-proxies/b: listen.port", spec.CodeConflict},
		{"same port as a listener", func(c *spec.Config) {
			c.Listeners["alt"] = &spec.Listener{Name: "alt", Port: 6380}
			c.RedisProxies["a"] = proxy("a", 6380)
		}, "redis-proxies/a: listen.port", spec.CodeConflict},
		{"route to a missing proxy", func(c *spec.Config) {
			c.RedisProxies["a"] = proxy("a", 6380, spec.RedisPrefixRoute{Prefix: "x:", RedisProxy: "gone"})
		}, "redis-proxies/a: prefixRoutes[0].redisProxy", spec.CodeUnknownRef},
		{"cluster named like the proxy's", func(c *spec.Config) {
			c.Clusters["redis_a"] = &spec.Cluster{Name: "redis_a", Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: 1}}}
			c.RedisProxies["a"] = proxy("a", 6380)
		}, "redis-proxies/a: name", spec.CodeConflict},
		{"listener named like the proxy's", func(c *spec.Config) {
			c.Listeners["redis_a"] = &spec.Listener{Name: "redis_a", Port: 8080}
			c.RedisProxies["a"] = proxy("a", 6380)
		}, "redis-proxies/a: name", spec.CodeConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := spec.NewConfig(1)
			tc.build(c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("got %#v, want field %q code %q", err, tc.field, tc.code)
			}
		})
	}
}
