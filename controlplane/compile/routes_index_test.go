package compile

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

// virtualHostsByScan is virtualHosts as it was before routes were indexed
// by host: every domain compared with every route. The index must not
// change which routes a virtual host holds, nor their order.
func (c *compiler) virtualHostsByScan() []virtualHost {
	domains := map[string]bool{}
	for _, r := range c.cfg.Routes {
		for _, h := range hostsOf(r) {
			domains[h] = true
		}
	}
	var out []virtualHost
	for _, d := range spec.SortedKeys(domains) {
		var members []vhRoute
		for _, name := range spec.SortedKeys(c.cfg.Routes) {
			r := c.cfg.Routes[name]
			if t, ok := covers(hostsOf(r), d); ok {
				members = append(members, vhRoute{r, t})
			}
		}
		sortRoutes(members)
		out = append(out, virtualHost{d, members})
	}
	return out
}

// Random route sets mixing exact hosts (in any case, some listed twice),
// "*.suffix" patterns at several depths, "*" and no hosts get the same
// virtual hosts, holding the same routes in the same order and tiers,
// through the host index as by comparing every route with every domain.
func TestRouteIndexMatchesScan(t *testing.T) {
	labels := []string{"a", "b", "api", "x"}
	host := func(rng *rand.Rand) string {
		h := labels[rng.IntN(len(labels))]
		for range rng.IntN(3) {
			h += "." + labels[rng.IntN(len(labels))]
		}
		h += ".com"
		switch rng.IntN(6) {
		case 0:
			return "*." + h
		case 1:
			return "*"
		case 2:
			return "API." + h // hosts are lowercased
		}
		return h
	}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg := spec.NewConfig(1)
		for i := range 1 + rng.IntN(40) {
			r := &spec.Route{Name: fmt.Sprintf("r%02d", i), Cluster: "c",
				Match: spec.RouteMatch{PathPrefix: fmt.Sprintf("/p%d", rng.IntN(4))}}
			for range rng.IntN(4) {
				r.Match.Hosts = append(r.Match.Hosts, host(rng))
			}
			if rng.IntN(5) == 0 && len(r.Match.Hosts) > 0 {
				r.Match.Hosts = append(r.Match.Hosts, r.Match.Hosts[0])
			}
			if rng.IntN(3) == 0 {
				r.Match.Methods = []string{"GET"}
			}
			cfg.Routes[r.Name] = r
		}
		c := &compiler{cfg: cfg, opts: Options{}.withDefaults()}
		want, got := c.virtualHostsByScan(), c.virtualHosts()
		eq := func(a, b virtualHost) bool {
			return a.domain == b.domain && slices.Equal(a.routes, b.routes)
		}
		if !slices.EqualFunc(want, got, eq) {
			t.Fatalf("seed %d: the host index gives other virtual hosts than the scan:\n got %s\nwant %s", seed, showHosts(got), showHosts(want))
		}
	}
}

// showHosts prints virtual hosts as domain[route/tier ...].
func showHosts(vhs []virtualHost) string {
	out := ""
	for _, v := range vhs {
		out += " " + v.domain + "["
		for i, m := range v.routes {
			if i > 0 {
				out += " "
			}
			out += fmt.Sprintf("%s/%d", m.r.Name, m.tier)
		}
		out += "]"
	}
	return out
}
