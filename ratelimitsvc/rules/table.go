package rules

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// TenantKey is the descriptor entry key that names a request's tenant; rules
// with a Tenant apply only to requests carrying that tenant.
const TenantKey = "tenant"

// RemoteAddressKey is the entry Envoy's remote_address action sets to the
// client address it derived from trusted hops (xff_num_trusted_hops), never
// from a client-supplied header. Rule values under this key may be CIDR
// prefixes ("10.0.0.0/8", "2001:db8::/32"); the longest matching prefix
// wins, after an exact value and before prefix wildcards. A bucket is kept
// per address (as for wildcards).
const RemoteAddressKey = "remote_address"

// Table is an immutable, indexed set of rules. It is safe for concurrent use.
type Table struct {
	domains map[string]*node
	rules   []*Rule
	// Versions is the version of each source the table was built from.
	Versions map[string]string
}

type node struct {
	// exact is keyed by key+"\x00"+value; wildcard by key (empty value).
	exact    map[string]*node
	wildcard map[string]*node
	prefixes []prefixChild
	// cidrs match RemoteAddressKey values, longest prefix first.
	cidrs []cidrChild
	// rules are the candidates at this node, best first.
	rules []*Rule
}

type prefixChild struct {
	key, prefix string
	n           *node
}

type cidrChild struct {
	p netip.Prefix
	n *node
}

// isCIDR says whether a rule entry is a CIDR match.
func isCIDR(e Entry) bool { return e.Key == RemoteAddressKey && strings.Contains(e.Value, "/") }

func newNode() *node {
	return &node{exact: map[string]*node{}, wildcard: map[string]*node{}}
}

// Build validates every rule and indexes them. IDs must be unique.
func Build(rs []*Rule, versions map[string]string) (*Table, error) {
	t := &Table{domains: map[string]*node{}, Versions: maps.Clone(versions)}
	seen := map[string]bool{}
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if seen[r.ID] {
			return nil, fmt.Errorf("%w: duplicate rule id %q", ErrInvalid, r.ID)
		}
		seen[r.ID] = true
		n := t.domains[r.Domain]
		if n == nil {
			n = newNode()
			t.domains[r.Domain] = n
		}
		for _, d := range r.Descriptors {
			n = n.child(d)
		}
		if !r.NoLimit { // the node exists, and that is all it declares
			n.rules = append(n.rules, r)
		}
		t.rules = append(t.rules, r)
	}
	for _, n := range t.domains {
		n.sort()
	}
	slices.SortFunc(t.rules, func(a, b *Rule) int { return cmp.Compare(a.ID, b.ID) })
	return t, nil
}

func (n *node) child(d Entry) *node {
	switch {
	case isCIDR(d):
		p := netip.MustParsePrefix(d.Value).Masked() // Validate parsed it
		for _, cc := range n.cidrs {
			if cc.p == p {
				return cc.n
			}
		}
		c := newNode()
		n.cidrs = append(n.cidrs, cidrChild{p, c})
		slices.SortStableFunc(n.cidrs, func(a, b cidrChild) int { return cmp.Compare(b.p.Bits(), a.p.Bits()) })
		return c
	case d.Value == "":
		c := n.wildcard[d.Key]
		if c == nil {
			c = newNode()
			n.wildcard[d.Key] = c
		}
		return c
	case strings.HasSuffix(d.Value, "*"):
		p := strings.TrimSuffix(d.Value, "*")
		for _, pc := range n.prefixes {
			if pc.key == d.Key && pc.prefix == p {
				return pc.n
			}
		}
		c := newNode()
		n.prefixes = append(n.prefixes, prefixChild{d.Key, p, c})
		return c
	default:
		k := d.Key + "\x00" + d.Value
		c := n.exact[k]
		if c == nil {
			c = newNode()
			n.exact[k] = c
		}
		return c
	}
}

// sort orders candidates: higher priority, then tenant-specific, then xDS
// before files, then ID. Prefix wildcards stay in configuration order: as
// in envoyproxy/ratelimit, the first one that matches wins.
func (n *node) sort() {
	slices.SortFunc(n.rules, func(a, b *Rule) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(b2i(b.Tenant != ""), b2i(a.Tenant != "")); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Source, a.Source); c != 0 { // "xds" > "file"
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, c := range n.exact {
		c.sort()
	}
	for _, c := range n.wildcard {
		c.sort()
	}
	for _, pc := range n.prefixes {
		pc.n.sort()
	}
	for _, cc := range n.cidrs {
		cc.n.sort()
	}
}

// Match returns the rule for one request descriptor, or nil. As in
// envoyproxy/ratelimit, entries are walked in order (exact value, then —
// for RemoteAddressKey only — the longest matching CIDR, then the first
// matching prefix wildcard, then any value) and a limit applies only at the node the
// last entry reaches; among that node's rules the first one whose tenant is
// empty or equals tenant wins. A node is taken when it exists, whether or not
// it holds a rule: a descriptor declared without a limit (NoLimit) ends the
// walk at its node as an exact rule would, and the request gets no limit.
func (t *Table) Match(domain string, entries []Entry, tenant string) *Rule {
	n := t.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		next := n.exact[e.Key+"\x00"+e.Value]
		if next == nil && len(n.cidrs) > 0 && e.Key == RemoteAddressKey {
			if a, err := netip.ParseAddr(e.Value); err == nil {
				a = a.Unmap()
				for _, cc := range n.cidrs {
					if cc.p.Contains(a) {
						next = cc.n
						break
					}
				}
			}
		}
		if next == nil {
			for _, pc := range n.prefixes {
				if pc.key == e.Key && strings.HasPrefix(e.Value, pc.prefix) {
					next = pc.n
					break
				}
			}
		}
		if next == nil {
			next = n.wildcard[e.Key]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	for _, r := range n.rules {
		if r.Tenant == "" || r.Tenant == tenant {
			return r
		}
	}
	return nil
}

// Rules returns every rule ordered by ID. Callers must not modify them.
func (t *Table) Rules() []*Rule { return t.rules }

// Live holds the current Table and the per-source rules it is built from.
// Load is lock-free; Update serializes writers (sources) with a mutex.
type Live struct {
	cur      atomic.Pointer[Table]
	mu       sync.Mutex
	sources  map[string][]*Rule
	versions map[string]string
}

// NewLive returns a Live holding an empty table.
func NewLive() *Live {
	l := &Live{sources: map[string][]*Rule{}, versions: map[string]string{}}
	t, _ := Build(nil, nil)
	l.cur.Store(t)
	return l
}

// Load returns the current table; never nil.
func (l *Live) Load() *Table { return l.cur.Load() }

// Update replaces one source's rules and swaps in a new table. On error the
// current table stays.
func (l *Live) Update(source, version string, rs []*Rule) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := maps.Clone(l.sources)
	next[source] = rs
	vers := maps.Clone(l.versions)
	vers[source] = version
	var all []*Rule
	for _, s := range slices.Sorted(maps.Keys(next)) {
		all = append(all, next[s]...)
	}
	t, err := Build(all, vers)
	if err != nil {
		return err
	}
	l.sources, l.versions = next, vers
	l.cur.Store(t)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
