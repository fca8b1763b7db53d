package api

import (
	"fmt"
	"net/http"

	"github.com/portico-io/portico/kvnode/coordinator"
)

// kvRouter serves /v1/kv/: a key whose keyspace (the prefix before the
// first ':') is declared CP goes to the consensus tier, any other to the
// ring. The two never share a keyspace, so a key has exactly one home.
type kvRouter struct {
	kv Engine
	// cp is nil on a node without the consensus tier.
	cp          *cpHandler
	cpKeyspaces map[string]bool
}

func keyspaceSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, ks := range names {
		m[ks] = true
	}
	return m
}

func (rt *kvRouter) serve(w http.ResponseWriter, r *http.Request) {
	ks := coordinator.Keyspace([]byte(r.PathValue("key")))
	err := reservedKeyspace("key", ks)
	if err == nil {
		err = allowKeyspace(r, "key", ks)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if rt.cpKeyspaces[ks] {
		if rt.cp == nil {
			writeError(w, http.StatusNotImplemented, "not_implemented", fmt.Sprintf("keyspace %q is declared CP but the consensus tier is not available on this node", ks), "")
			return
		}
		rt.cp.serveKV(w, r)
		return
	}
	if err := RejectCPOptions(r, ks); err != nil {
		writeErr(w, err)
		return
	}
	switch r.Method {
	case http.MethodGet:
		get(w, r, rt.kv)
	case http.MethodPut:
		write(w, r, rt.kv, false)
	case http.MethodDelete:
		write(w, r, rt.kv, true)
	}
}

// ringOnly rejects a batch naming a key of a CP keyspace: batch reads are
// the ring's (quorum reads of many keys); a CP key is read one at a time.
func (rt *kvRouter) ringOnly(keys [][]byte) error {
	for i, k := range keys {
		if ks := coordinator.Keyspace(k); rt.cpKeyspaces[ks] {
			return &BadRequest{http.StatusBadRequest, "cp_keyspace", fmt.Sprintf("keys[%d]", i),
				fmt.Sprintf("keyspace %q is served by the consensus tier (--cp-keyspaces): read its keys with GET /v1/kv/{key} or /v1/cp/%s/{key}, not in a batch", ks, ks)}
		}
	}
	return nil
}

// RejectCPOptions refuses the consensus tier's options on a request for
// ring keyspace ks: the ring has no revisions, stale reads or leases, and
// ignoring them would turn a compare-and-set into a blind write or a
// leased key into a permanent one.
func RejectCPOptions(r *http.Request, ks string) error {
	hint := fmt.Sprintf("keyspace %q is served by the ring, which has no revisions; declare it with --cp-keyspaces (PORTICO_KV_CP_KEYSPACES) for", ks)
	q := r.URL.Query()
	switch {
	case r.Header.Get("If-Match") != "":
		return &BadRequest{http.StatusBadRequest, "cp_only", "If-Match", hint + " compare-and-set"}
	case q.Has("stale"):
		return &BadRequest{http.StatusBadRequest, "cp_only", "stale", hint + " linearizable and stale reads (the ring reads at ?consistency=ONE|QUORUM|ALL)"}
	case q.Has("lease"):
		return &BadRequest{http.StatusBadRequest, "cp_only", "lease", hint + " leases (the ring expires keys with ?ttl=SECONDS)"}
	}
	return nil
}

// RejectRingOptions refuses the ring's options on a /v1/kv/ request for CP
// keyspace ks: consensus-served keys are linearizable and versioned by
// revision, so consistency levels, vector-clock contexts, TTLs and
// idempotency keys have no meaning there.
func RejectRingOptions(r *http.Request, ks string) error {
	hint := fmt.Sprintf("keyspace %q is served by the consensus tier (--cp-keyspaces):", ks)
	q := r.URL.Query()
	switch {
	case q.Has("consistency"):
		return &BadRequest{http.StatusBadRequest, "ring_only", "consistency", hint + " reads are linearizable, or local with ?stale=true; consistency levels are for ring keyspaces"}
	case q.Has("ttl"):
		return &BadRequest{http.StatusBadRequest, "ring_only", "ttl", hint + " keys expire with a lease (PUT ?lease=ID, POST /v1/cp/leases), not a ttl"}
	case r.Header.Get("X-KV-Context") != "":
		return &BadRequest{http.StatusBadRequest, "ring_only", "X-KV-Context", hint + " versions are revisions; send If-Match with the ETag instead of a vector-clock context"}
	case r.Header.Get("Idempotency-Key") != "":
		return &BadRequest{http.StatusBadRequest, "ring_only", "Idempotency-Key", hint + " make a retry safe with If-Match (compare-and-set) instead of an idempotency key"}
	}
	return nil
}
