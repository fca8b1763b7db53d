package spec

import (
	"maps"
	"slices"
)

// KindInfo is everything the rest of the control plane needs to know about
// one resource kind to handle it without naming it: how to make and find
// its resources, what they refer to, and who may touch them. The spec,
// the store and the admin API dispatch on it, so adding a kind takes its
// type, its Config field and one entry in kindTable.
type KindInfo struct {
	// Kind is the kind's name: the admin API path segment and the store's
	// kind column.
	Kind Kind
	// Noun names one resource in messages ("redis proxy %q does not exist").
	Noun string
	// NameField is the JSON field holding a resource's name.
	NameField string
	// Served kinds are served as /admin/v1/<kind> and held by manifests.
	// API keys are not: they are minted under their consumer or imported
	// as hashes, and never listed with their hashes.
	Served bool
	// Security kinds are credentials and trust material: reading and
	// changing them is the security admin's, not config's.
	Security bool
	// Hidden are JSON fields of a stored resource that the admin API
	// never shows, not even in audit diffs: an API key's hash, a secret's
	// private key (plain or sealed).
	Hidden []string
	// KeptOnRollback kinds are identities and credentials: a rollback keeps
	// the head's content, so that undoing a bad route never un-revokes a
	// token or brings back a deleted key.
	KeptOnRollback bool
	// RefersTo lists the kinds this kind's resources may refer to; Refs
	// returns the references of one resource (every one naming a kind in
	// RefersTo). Both are nil for a kind that refers to nothing.
	RefersTo []Kind
	Refs     func(Resource) []Ref

	coll collection
}

// Ref is one reference from a resource to another.
type Ref struct {
	// Field is the referring field, as validation errors name it.
	Field string
	Kind  Kind
	Name  string
	// Type, when set, is the type the referenced resource must have (a
	// secret's tls or ca).
	Type string
}

// typed is a resource with a type a Ref can require (Secret).
type typed interface{ resourceType() string }

func (s *Secret) resourceType() string { return s.Type }

// kindTable is the kinds in the order the admin API documents them, which
// is also the order of Kinds, of compilation and of diffs.
var kindTable = []*KindInfo{
	{Kind: KindCluster, Noun: "cluster", NameField: "name", Served: true,
		RefersTo: []Kind{KindSecret}, Refs: refsOf((*Cluster).refs),
		coll: mapColl[Cluster]{func(c *Config) *map[string]*Cluster { return &c.Clusters }}},
	{Kind: KindRoute, Noun: "route", NameField: "name", Served: true,
		RefersTo: []Kind{KindCluster, KindJWTProvider}, Refs: refsOf((*Route).refs),
		coll: mapColl[Route]{func(c *Config) *map[string]*Route { return &c.Routes }}},
	{Kind: KindJWTProvider, Noun: "jwt provider", NameField: "name", Served: true, Security: true,
		coll: mapColl[JWTProvider]{func(c *Config) *map[string]*JWTProvider { return &c.JWTProviders }}},
	{Kind: KindConsumer, Noun: "consumer", NameField: "name", Served: true, KeptOnRollback: true,
		coll: tableColl[Consumer]{func(c *Config) **Table[*Consumer] { return &c.Consumers }}},
	{Kind: KindAPIKey, Noun: "API key", NameField: "name", KeptOnRollback: true, Hidden: []string{"sha256"},
		RefersTo: []Kind{KindConsumer}, Refs: refsOf((*APIKey).refs),
		coll: tableColl[APIKey]{func(c *Config) **Table[*APIKey] { return &c.APIKeys }}},
	{Kind: KindRevocation, Noun: "revocation", NameField: "jti", Served: true, Security: true, KeptOnRollback: true,
		coll: tableColl[Revocation]{func(c *Config) **Table[*Revocation] { return &c.Revocations }}},
	{Kind: KindRateLimitRule, Noun: "rate-limit rule", NameField: "name", Served: true,
		coll: mapColl[RateLimitRule]{func(c *Config) *map[string]*RateLimitRule { return &c.RateLimitRules }}},
	{Kind: KindSecret, Noun: "secret", NameField: "name", Served: true, Security: true,
		Hidden: []string{"privateKey", "sealedPrivateKey"},
		coll:   mapColl[Secret]{func(c *Config) *map[string]*Secret { return &c.Secrets }}},
	{Kind: KindListener, Noun: "listener", NameField: "name", Served: true,
		RefersTo: []Kind{KindSecret}, Refs: refsOf((*Listener).refs),
		coll: mapColl[Listener]{func(c *Config) *map[string]*Listener { return &c.Listeners }}},
	{Kind: KindRedisProxy, Noun: "redis proxy", NameField: "name", Served: true,
		RefersTo: []Kind{KindRedisProxy}, Refs: refsOf((*RedisProxy).refs),
		coll: mapColl[RedisProxy]{func(c *Config) *map[string]*RedisProxy { return &c.RedisProxies }}},
}

// kindIndex finds a kind's entry by name.
var kindIndex = func() map[Kind]*KindInfo {
	m := make(map[Kind]*KindInfo, len(kindTable))
	for _, d := range kindTable {
		m[d.Kind] = d
	}
	return m
}()

// Info returns k's entry, or nil for an unknown kind. The entry is shared:
// callers must not modify it.
func (k Kind) Info() *KindInfo { return kindIndex[k] }

// ServedKinds lists the Served kinds, in Kinds order.
func ServedKinds() []Kind {
	var out []Kind
	for _, d := range kindTable {
		if d.Served {
			out = append(out, d.Kind)
		}
	}
	return out
}

// KindOf returns the kind of a resource value ("" for a type no kind has).
func KindOf(r Resource) Kind {
	if d := infoOf(r); d != nil {
		return d.Kind
	}
	return ""
}

func infoOf(r Resource) *KindInfo {
	for _, d := range kindTable {
		if d.coll.is(r) {
			return d
		}
	}
	return nil
}

// New returns an empty resource of kind d.
func (d *KindInfo) New() Resource { return d.coll.new() }

// refsOf adapts a typed reference lister to KindInfo.Refs.
func refsOf[T any, P interface {
	*T
	Resource
}](f func(P) []Ref) func(Resource) []Ref {
	return func(r Resource) []Ref {
		if p, ok := r.(P); ok {
			return f(p)
		}
		return nil
	}
}

// collection is how a kind's resources are kept in a Config: a map, or a
// Table for the kinds that number in the millions.
type collection interface {
	new() Resource
	is(Resource) bool
	init(c *Config)
	// own replaces c's collection by a copy c may change (a Table's
	// original is frozen by it).
	own(c *Config)
	// share makes dst's collection src's (shared, not copied).
	share(dst, src *Config)
	get(c *Config, name string) (Resource, bool)
	put(c *Config, r Resource)
	del(c *Config, name string)
	names(c *Config) []string
	// each calls fn for every resource, in no order.
	each(c *Config, fn func(name string, r Resource))
	// diff calls fn for every name whose entry differs between base and
	// c, with c's entry (nil when c has none). For a Table cloned from
	// base's it costs the shards that changed.
	diff(c, base *Config, fn func(name string, cur Resource))
}

// mapColl is a kind kept in a map[string]*T field of Config.
type mapColl[T any] struct {
	field func(*Config) *map[string]*T
}

func (m mapColl[T]) new() Resource { return any(new(T)).(Resource) }

func (m mapColl[T]) is(r Resource) bool {
	_, ok := any(r).(*T)
	return ok
}

func (m mapColl[T]) init(c *Config)         { *m.field(c) = map[string]*T{} }
func (m mapColl[T]) own(c *Config)          { *m.field(c) = maps.Clone(*m.field(c)) }
func (m mapColl[T]) share(dst, src *Config) { *m.field(dst) = *m.field(src) }

func (m mapColl[T]) get(c *Config, name string) (Resource, bool) {
	v, ok := (*m.field(c))[name]
	if !ok {
		return nil, false
	}
	return any(v).(Resource), true
}

func (m mapColl[T]) put(c *Config, r Resource) {
	(*m.field(c))[r.ResourceName()] = any(r).(*T)
}

func (m mapColl[T]) del(c *Config, name string) { delete(*m.field(c), name) }
func (m mapColl[T]) names(c *Config) []string   { return SortedKeys(*m.field(c)) }

func (m mapColl[T]) each(c *Config, fn func(string, Resource)) {
	for name, v := range *m.field(c) {
		fn(name, any(v).(Resource))
	}
}

func (m mapColl[T]) diff(c, base *Config, fn func(string, Resource)) {
	cur, old := *m.field(c), *m.field(base)
	for name, v := range cur {
		if o, ok := old[name]; !ok || o != v {
			fn(name, any(v).(Resource))
		}
	}
	for name := range old {
		if _, ok := cur[name]; !ok {
			fn(name, nil)
		}
	}
}

// tableColl is a kind kept in a *Table[*T] field of Config.
type tableColl[T any] struct {
	field func(*Config) **Table[*T]
}

func (t tableColl[T]) new() Resource { return any(new(T)).(Resource) }

func (t tableColl[T]) is(r Resource) bool {
	_, ok := any(r).(*T)
	return ok
}

func (t tableColl[T]) init(c *Config)         { *t.field(c) = NewTable[*T]() }
func (t tableColl[T]) own(c *Config)          { *t.field(c) = (*t.field(c)).Clone() }
func (t tableColl[T]) share(dst, src *Config) { *t.field(dst) = *t.field(src) }

func (t tableColl[T]) get(c *Config, name string) (Resource, bool) {
	v, ok := (*t.field(c)).Get(name)
	if !ok {
		return nil, false
	}
	return any(v).(Resource), true
}

func (t tableColl[T]) put(c *Config, r Resource) {
	(*t.field(c)).Set(r.ResourceName(), any(r).(*T))
}

func (t tableColl[T]) del(c *Config, name string) { (*t.field(c)).Delete(name) }
func (t tableColl[T]) names(c *Config) []string   { return (*t.field(c)).Names() }

func (t tableColl[T]) each(c *Config, fn func(string, Resource)) {
	for name, v := range (*t.field(c)).All() {
		fn(name, any(v).(Resource))
	}
}

func (t tableColl[T]) diff(c, base *Config, fn func(string, Resource)) {
	(*t.field(c)).Changes(*t.field(base), func(name string, _, v *T, _, has bool) bool {
		if has {
			fn(name, any(v).(Resource))
		} else {
			fn(name, nil)
		}
		return true
	})
}

// refError is the first of r's references that names no resource, or a
// resource of the wrong type, as a *FieldError on "<kind>/<name>: <field>".
func (c *Config) refError(d *KindInfo, name string, r Resource) error {
	if d.Refs == nil {
		return nil
	}
	for _, ref := range d.Refs(r) {
		field := string(d.Kind) + "/" + name + ": " + ref.Field
		t := ref.Kind.Info()
		target, ok := t.coll.get(c, ref.Name)
		if !ok {
			return fieldErr(field, CodeUnknownRef, "%s %q does not exist", t.Noun, ref.Name)
		}
		if tr, ok := target.(typed); ok && ref.Type != "" && tr.resourceType() != ref.Type {
			return fieldErr(field, CodeInvalid, "%s %q is of type %s; want a %s %s", t.Noun, ref.Name, tr.resourceType(), ref.Type, t.Noun)
		}
	}
	return nil
}

// checkRefs checks the references of every resource of kind d. With a
// base (a config that validated), only resources that changed and those
// referring to a resource that went away (or, for typed targets, changed)
// can fail, so only they are looked at: for a Table cloned from base's,
// the shards that changed. The failing resource first in name order is
// reported, so the error does not depend on base.
func (c *Config) checkRefs(d *KindInfo, base *Config) error {
	if d.Refs == nil {
		return nil
	}
	first, firstErr := "", error(nil)
	note := func(name string, r Resource) {
		if r == nil || (firstErr != nil && name >= first) {
			return
		}
		if err := c.refError(d, name, r); err != nil {
			first, firstErr = name, err
		}
	}
	if base == nil {
		d.coll.each(c, note)
		return firstErr
	}
	gone := map[Kind]map[string]bool{}
	for _, k := range d.RefersTo {
		t := k.Info()
		_, isTyped := t.New().(typed)
		t.coll.diff(c, base, func(name string, cur Resource) {
			if cur == nil || isTyped {
				if gone[k] == nil {
					gone[k] = map[string]bool{}
				}
				gone[k][name] = true
			}
		})
	}
	if len(gone) > 0 {
		// A resource went away: its referrers can be anywhere (rare; one scan).
		d.coll.each(c, func(name string, r Resource) {
			for _, ref := range d.Refs(r) {
				if gone[ref.Kind][ref.Name] {
					note(name, r)
					return
				}
			}
		})
	}
	d.coll.diff(c, base, note)
	return firstErr
}

// referrers lists, in kind then name order, the resources and fields
// referring to the resource of kind k named name ("listeners/https:
// tls.certificates[0]"). It reads every resource of the kinds that may
// refer to k.
func (c *Config) referrers(k Kind, name string) []string {
	var out []string
	for _, d := range kindTable {
		if !slices.Contains(d.RefersTo, k) {
			continue
		}
		for _, n := range d.coll.names(c) {
			r, _ := d.coll.get(c, n)
			for _, ref := range d.Refs(r) {
				if ref.Kind == k && ref.Name == name {
					out = append(out, string(d.Kind)+"/"+n+": "+ref.Field)
				}
			}
		}
	}
	return out
}

// referenced returns the names of every resource of kind k that some
// resource refers to, sorted.
func (c *Config) referenced(k Kind) []string {
	set := map[string]bool{}
	for _, d := range kindTable {
		if !slices.Contains(d.RefersTo, k) {
			continue
		}
		d.coll.each(c, func(_ string, r Resource) {
			for _, ref := range d.Refs(r) {
				if ref.Kind == k {
					set[ref.Name] = true
				}
			}
		})
	}
	return SortedKeys(set)
}

// Config operations by kind.

// Put stores r in the config's collection for its kind (replacing any
// same-named one). A resource of another kind than k goes to its own.
func (c *Config) Put(k Kind, r Resource) {
	d := k.Info()
	if d == nil || !d.coll.is(r) {
		d = infoOf(r)
	}
	if d != nil {
		d.coll.put(c, r)
	}
}

// Delete removes the named resource of kind k.
func (c *Config) Delete(k Kind, name string) {
	if d := k.Info(); d != nil {
		d.coll.del(c, name)
	}
}

// Get returns the named resource of kind k, or nil.
func (c *Config) Get(k Kind, name string) Resource {
	if d := k.Info(); d != nil {
		if r, ok := d.coll.get(c, name); ok {
			return r
		}
	}
	return nil
}

// Names returns the names of the resources of kind k, sorted.
func (c *Config) Names(k Kind) []string {
	if d := k.Info(); d != nil {
		return d.coll.names(c)
	}
	return nil
}

// CloneKind replaces c's collection of kind k by a copy c may change,
// leaving the old one to the configs sharing it (a Table is frozen by it).
func (c *Config) CloneKind(k Kind) {
	if d := k.Info(); d != nil {
		d.coll.own(c)
	}
}

// ShareKind makes c's collection of kind k the one of from: shared, not
// copied, so neither may change it afterwards without CloneKind.
func (c *Config) ShareKind(k Kind, from *Config) {
	if d := k.Info(); d != nil {
		d.coll.share(c, from)
	}
}
