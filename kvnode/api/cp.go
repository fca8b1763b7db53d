package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/kvnode/apitoken"
	"github.com/portico-io/portico/kvnode/cp"
)

// CPEngine is the consensus tier as the HTTP layer uses it.
type CPEngine interface {
	Get(ctx context.Context, keyspace, key string, stale bool) (cp.Entry, error)
	Put(ctx context.Context, keyspace, key string, value []byte, ifRevision *uint64, lease uint64) (cp.Entry, error)
	Delete(ctx context.Context, keyspace, key string, ifRevision *uint64) (uint64, error)
	Members(ctx context.Context) ([]cp.Member, error)
	AddVoter(ctx context.Context, id, raftAddr string) error
	RemoveServer(ctx context.Context, id string) error
	Txn(ctx context.Context, compares []cp.Compare, ops []cp.TxnOp) (uint64, error)
	GrantLease(ctx context.Context, ttlSeconds int64) (uint64, error)
	KeepAlive(ctx context.Context, id uint64) (int64, error)
	RevokeLease(ctx context.Context, id uint64) error
	Watch(ctx context.Context, keyspace, prefix string, from uint64, send func([]cp.Event) error) error
	SaveSnapshot(ctx context.Context, w io.Writer) (uint64, error)
	RestoreSnapshot(ctx context.Context, data []byte) (uint64, error)
}

var _ CPEngine = (*cp.Group)(nil)

// Headers of the consensus tier.
const (
	// HeaderRevision carries the key's revision (ETag without quotes); on
	// a DELETE, the revision the delete was applied at.
	HeaderRevision = "X-KV-Revision"
	// HeaderForwarded marks a request a follower forwarded to the leader
	// (a forwarded request is never forwarded again); on the answer it
	// names the node that served it.
	HeaderForwarded = "X-KV-Forwarded"
	// HeaderOnBehalfOf names, on a forwarded request, the caller a
	// follower vouches for with its own certificate (one that
	// authenticated with a certificate, not a bearer token): the leader
	// records it as the author of a token write (tokens.go). Heeded only
	// from a kvnode certificate.
	HeaderOnBehalfOf = "X-KV-On-Behalf-Of"
	// HeaderLeader* name the leader in 503 answers when one is known.
	HeaderLeaderID       = "X-KV-Leader-Id"
	HeaderLeaderHTTPAddr = "X-KV-Leader-Http-Addr"
	HeaderLeaderRaftAddr = "X-KV-Leader-Raft-Addr"
	// LeasesKeyspace is reserved: /v1/cp/leases/… is the lease API.
	LeasesKeyspace = "leases"
	// MaxKeyspaceBytes bounds a keyspace name.
	MaxKeyspaceBytes = 64
	// forwardTimeout bounds a forwarded request; the leader bounds its own
	// work by the group's apply timeout, which is shorter.
	forwardTimeout = 10 * time.Second
)

// CPRequest is a parsed /v1/cp/{keyspace}/{key} request.
type CPRequest struct {
	Keyspace, Key string
	Value         []byte
	// IfRevision is If-Match: the key's expected revision, 0 = absent.
	IfRevision *uint64
	Stale      bool
	// Lease (PUT ?lease=ID) attaches the key to a lease.
	Lease uint64
}

// ParseKeyspace validates a keyspace name: 1–64 of [A-Za-z0-9_.-]
// (authn.CheckKeyspace), not LeasesKeyspace (400) nor a keyspace reserved
// for kvnode's own state (403, see reservedKeyspace).
func ParseKeyspace(s string) (string, error) {
	if err := authn.CheckKeyspace(s); err != nil {
		reason := err.Error()
		var ke *authn.KeyspaceError
		if errors.As(err, &ke) {
			reason = ke.Reason
		}
		return "", &BadRequest{http.StatusBadRequest, "invalid_keyspace", "keyspace", fmt.Sprintf("keyspace %q: %s", s, reason)}
	}
	if err := reservedKeyspace("keyspace", s); err != nil {
		return "", err
	}
	if s == LeasesKeyspace {
		return "", &BadRequest{http.StatusBadRequest, "invalid_keyspace", "keyspace", fmt.Sprintf("keyspace %q is reserved for /v1/cp/leases", s)}
	}
	return s, nil
}

// reservedKeyspace refuses, with 403 whoever asks, a keyspace that holds
// kvnode's own state in the consensus tier (apitoken.Keyspace: the API
// tokens' hashes), wherever a data request names it: /v1/kv/ keys (ring or
// CP), batches, /v1/cp/ paths, transactions, watches. Only the token
// routes under /admin/v1/tokens reach it.
func reservedKeyspace(field, ks string) error {
	if ks != apitoken.Keyspace {
		return nil
	}
	return &BadRequest{http.StatusForbidden, "reserved_keyspace", field,
		fmt.Sprintf("keyspace %q is reserved for kvnode's API tokens (/admin/v1/tokens): no data route may read or write it", ks)}
}

// ParseIfMatch parses If-Match: a revision, quoted or not ("" = none).
func ParseIfMatch(s string) (*uint64, error) {
	if s == "" {
		return nil, nil
	}
	t := strings.TrimSpace(s)
	if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
		t = t[1 : len(t)-1]
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return nil, &BadRequest{http.StatusBadRequest, "invalid_if_match", "If-Match", fmt.Sprintf("If-Match %q is not a revision (a decimal number, 0 = the key must not exist)", s)}
	}
	return &n, nil
}

// ParseCP validates a /v1/cp/{keyspace}/{key} request.
func ParseCP(r *http.Request) (CPRequest, error) {
	ks, err := ParseKeyspace(r.PathValue("keyspace"))
	if err != nil {
		return CPRequest{}, err
	}
	return parseCPKey(r, ks, r.PathValue("key"))
}

// ParseKVAsCP validates /v1/kv/{keyspace}:{key} for a keyspace the
// consensus tier serves into the request /v1/cp/{keyspace}/{key} would
// give; the ring's options are refused (RejectRingOptions).
func ParseKVAsCP(r *http.Request) (CPRequest, error) {
	full, err := ParseKey(r.PathValue("key"))
	if err != nil {
		return CPRequest{}, err
	}
	ks, key, _ := strings.Cut(string(full), ":")
	if err := RejectRingOptions(r, ks); err != nil {
		return CPRequest{}, err
	}
	if key == "" {
		return CPRequest{}, &BadRequest{http.StatusBadRequest, "invalid_key", "key", fmt.Sprintf("keyspace %q is served by the consensus tier: its keys are %s:<key>, with a non-empty key", ks, ks)}
	}
	if ks, err = ParseKeyspace(ks); err != nil {
		return CPRequest{}, err
	}
	return parseCPKey(r, ks, key)
}

// parseCPKey validates the rest of a key request in keyspace ks.
func parseCPKey(r *http.Request, ks, key string) (CPRequest, error) {
	cr := CPRequest{Keyspace: ks}
	k, err := ParseKey(key)
	if err != nil {
		return cr, err
	}
	cr.Key = string(k)
	switch v := r.URL.Query().Get("stale"); v {
	case "", "false":
	case "true":
		cr.Stale = true
	default:
		return cr, &BadRequest{http.StatusBadRequest, "invalid_stale", "stale", fmt.Sprintf("stale %q is not true or false", v)}
	}
	if cr.IfRevision, err = ParseIfMatch(r.Header.Get("If-Match")); err != nil {
		return cr, err
	}
	if v := r.URL.Query().Get("lease"); v != "" {
		if cr.Lease, err = strconv.ParseUint(v, 10, 64); err != nil || cr.Lease == 0 || r.Method != http.MethodPut {
			return cr, &BadRequest{http.StatusBadRequest, "invalid_lease", "lease", fmt.Sprintf("lease %q: a lease id, on PUT only", v)}
		}
	}
	if r.Method == http.MethodPut {
		cr.Value, err = readValue(r)
	}
	return cr, err
}

type cpHandler struct {
	e      CPEngine
	client *http.Client
	// scheme is how the leader's API is reached: https when the nodes run
	// TLS, with client presenting this node's certificate.
	scheme string
	// keyspaces are the keyspaces declared CP; any other is 404 under
	// /v1/cp/ (and served by the ring under /v1/kv/).
	keyspaces map[string]bool
}

// notCP is the error for a keyspace that is not declared CP: status 404
// for a path, 400 for a field of a body.
func notCP(status int, field, ks string) error {
	return &BadRequest{status, "keyspace_not_cp", field, fmt.Sprintf("keyspace %q is not served by the consensus tier: declare it with --cp-keyspaces (PORTICO_KV_CP_KEYSPACES) on every node", ks)}
}

// keyspace validates the {keyspace} path segment and checks that the
// caller may touch it and that it is declared.
func (h *cpHandler) keyspace(r *http.Request) (string, error) {
	ks, err := ParseKeyspace(r.PathValue("keyspace"))
	if err == nil {
		err = allowKeyspace(r, "keyspace", ks)
	}
	if err == nil && !h.keyspaces[ks] {
		err = notCP(http.StatusNotFound, "keyspace", ks)
	}
	return ks, err
}

// forwardIdleConns is how many idle connections a follower keeps to the
// leader. Every forwarded request goes to that one host, so the default
// (2 per host) would close and re-dial connections under any concurrency.
const forwardIdleConns = 256

// mountCP serves the consensus tier's routes for the declared keyspaces
// and returns the handler, which /v1/kv/ also uses for those keyspaces.
// peerTLS (nil: plain http) is how a follower reaches the leader's API.
func mountCP(rt *routeTable, e CPEngine, keyspaces []string, peerTLS *tls.Config) *cpHandler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = forwardIdleConns, forwardIdleConns
	scheme := "http"
	if peerTLS != nil {
		// The leader is verified by its SPIFFE ID (kvnode), not a host
		// name; this node presents its own certificate, which the leader's
		// /admin/v1/ routes require of forwarded member changes.
		tr.TLSClientConfig, scheme = peerTLS.Clone(), "https"
	}
	h := &cpHandler{e: e, client: &http.Client{Transport: tr, Timeout: forwardTimeout}, scheme: scheme, keyspaces: keyspaceSet(keyspaces)}
	rt.handle("GET /v1/cp/{keyspace}/{key...}", authz.KVRead, h.serve)
	rt.handle("PUT /v1/cp/{keyspace}/{key...}", authz.KVWrite, h.serve)
	rt.handle("DELETE /v1/cp/{keyspace}/{key...}", authz.KVWrite, h.serve)
	rt.handle("POST /v1/cp:txn", authz.KVWrite, h.txn)
	rt.handle("GET /v1/cp/{keyspace}", authz.KVRead, h.watch)
	rt.handle("POST /v1/cp/leases", authz.KVWrite, h.leases)
	rt.handle("POST /v1/cp/leases/{id}/keepalive", authz.KVWrite, h.leases)
	rt.handle("DELETE /v1/cp/leases/{id}", authz.KVWrite, h.leases)
	rt.handle("GET /admin/v1/cp/members", authz.ClusterRead, h.members)
	rt.handle("POST /admin/v1/cp/members", authz.ClusterAdmin, h.members)
	rt.handle("DELETE /admin/v1/cp/members/{id}", authz.ClusterAdmin, h.members)
	rt.handle("POST /admin/v1/cp/snapshot", authz.ClusterAdmin, h.snapshot)
	rt.handle("POST /admin/v1/cp/restore", authz.ClusterAdmin, h.restore)
	return h
}

// CPTxnRequest is the body of POST /v1/cp:txn: if every compare holds,
// every op is applied, atomically, at one revision.
type CPTxnRequest struct {
	Compare []cp.Compare `json:"compare"`
	Ops     []cp.TxnOp   `json:"ops"`
}

// maxTxnBody bounds a transaction body (values are base64 in JSON).
const maxTxnBody = 8 << 20

// ParseCPTxn validates a transaction body: known fields only, valid
// keyspaces and keys, put/delete ops, values within MaxValueBytes, counts
// within cp.MaxTxnCompares and cp.MaxTxnOps.
func ParseCPTxn(body []byte) (CPTxnRequest, error) {
	var t CPTxnRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, &BadRequest{http.StatusBadRequest, "invalid_body", "body", "body: " + err.Error()}
	}
	if len(t.Compare) > cp.MaxTxnCompares {
		return t, &BadRequest{http.StatusBadRequest, "too_many_compares", "compare", fmt.Sprintf("at most %d compares", cp.MaxTxnCompares)}
	}
	if len(t.Ops) == 0 || len(t.Ops) > cp.MaxTxnOps {
		return t, &BadRequest{http.StatusBadRequest, "invalid_ops", "ops", fmt.Sprintf("1 to %d ops", cp.MaxTxnOps)}
	}
	check := func(field, keyspace, key string) error {
		var br *BadRequest
		if _, err := ParseKeyspace(keyspace); err != nil {
			if !errors.As(err, &br) {
				return err // ParseKeyspace's errors are all *BadRequest
			}
			return &BadRequest{br.Status, br.Code, field + ".keyspace", br.Message}
		}
		if _, err := ParseKey(key); err != nil {
			if !errors.As(err, &br) {
				return err // ParseKey's errors are all *BadRequest
			}
			return &BadRequest{http.StatusBadRequest, "invalid_key", field + ".key", br.Message}
		}
		return nil
	}
	for i, c := range t.Compare {
		field := fmt.Sprintf("compare[%d]", i)
		if err := check(field, c.Keyspace, c.Key); err != nil {
			return t, err
		}
		if c.Revision == nil && c.Value == nil {
			return t, &BadRequest{http.StatusBadRequest, "invalid_compare", field, "a compare needs a revision or a value"}
		}
	}
	for i, op := range t.Ops {
		field := fmt.Sprintf("ops[%d]", i)
		if err := check(field, op.Keyspace, op.Key); err != nil {
			return t, err
		}
		switch {
		case op.Op != cp.OpPut && op.Op != cp.OpDelete:
			return t, &BadRequest{http.StatusBadRequest, "invalid_op", field + ".op", fmt.Sprintf("op %q is not put or delete", op.Op)}
		case len(op.Value) > MaxValueBytes:
			return t, &BadRequest{http.StatusRequestEntityTooLarge, "value_too_large", field + ".value", fmt.Sprintf("value is %d bytes, at most %d", len(op.Value), MaxValueBytes)}
		case op.Op == cp.OpDelete && op.Value != nil:
			return t, &BadRequest{http.StatusBadRequest, "invalid_op", field + ".value", "a delete takes no value"}
		}
	}
	return t, nil
}

// txnKeyspaces refuses a transaction touching a keyspace the caller may
// not touch (403) or one not declared CP (400).
func (h *cpHandler) txnKeyspaces(r *http.Request, t CPTxnRequest) error {
	for i, c := range t.Compare {
		if err := allowKeyspace(r, fmt.Sprintf("compare[%d].keyspace", i), c.Keyspace); err != nil {
			return err
		}
	}
	for i, op := range t.Ops {
		if err := allowKeyspace(r, fmt.Sprintf("ops[%d].keyspace", i), op.Keyspace); err != nil {
			return err
		}
	}
	for i, c := range t.Compare {
		if !h.keyspaces[c.Keyspace] {
			return notCP(http.StatusBadRequest, fmt.Sprintf("compare[%d].keyspace", i), c.Keyspace)
		}
	}
	for i, op := range t.Ops {
		if !h.keyspaces[op.Keyspace] {
			return notCP(http.StatusBadRequest, fmt.Sprintf("ops[%d].keyspace", i), op.Keyspace)
		}
	}
	return nil
}

func (h *cpHandler) txn(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTxnBody+1))
	if err != nil {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", err.Error()})
		return
	}
	if len(body) > maxTxnBody {
		writeErr(w, &BadRequest{http.StatusRequestEntityTooLarge, "body_too_large", "body", fmt.Sprintf("at most %d bytes", maxTxnBody)})
		return
	}
	t, err := ParseCPTxn(body)
	if err == nil {
		err = h.txnKeyspaces(r, t)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	rev, err := h.e.Txn(r.Context(), t.Compare, t.Ops)
	var tc *cp.TxnConflictError
	switch {
	case err == nil:
		w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
		writeJSON(w, http.StatusOK, map[string]any{"succeeded": true, "revision": rev})
		return
	case errors.As(err, &tc):
		writeJSON(w, http.StatusPreconditionFailed, map[string]any{
			"error":     ErrBody{Code: "txn_conflict", Message: err.Error(), Field: fmt.Sprintf("compare[%d]", tc.Failed[0])},
			"succeeded": false, "failed": tc.Failed, "current": tc.Current,
		})
		return
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, r.URL.RequestURI(), body, nl)
		return
	}
	writeCPErr(w, r.Method, err)
}

// watch streams changes: GET /v1/cp/{keyspace}?watch=true&prefix=…&fromRevision=N
// answers 200 with one JSON event per line ({"revision","type","key","value"}),
// flushed per revision, until the client goes away; 410 when fromRevision is
// compacted. Served by the node asked (no forwarding).
func (h *cpHandler) watch(w http.ResponseWriter, r *http.Request) {
	ks, err := h.keyspace(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_watch", "watch", "listing a keyspace is not supported; use watch=true"})
		return
	}
	prefix := q.Get("prefix")
	if len(prefix) > MaxKeyBytes {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_prefix", "prefix", fmt.Sprintf("at most %d bytes", MaxKeyBytes)})
		return
	}
	var from uint64
	if v := q.Get("fromRevision"); v != "" {
		if from, err = strconv.ParseUint(v, 10, 64); err != nil || from == 0 {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_from_revision", "fromRevision", fmt.Sprintf("fromRevision %q is not a revision >= 1", v)})
			return
		}
	}
	fl, _ := w.(http.Flusher)
	started := false
	enc := json.NewEncoder(w)
	err = h.e.Watch(r.Context(), ks, prefix, from, func(evs []cp.Event) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	})
	var ce *cp.CompactedError
	switch {
	case errors.As(err, &ce) && !started:
		writeJSON(w, http.StatusGone, map[string]any{
			"error":         ErrBody{Code: "compacted", Message: err.Error(), Field: "fromRevision"},
			"firstRevision": ce.FirstRevision,
		})
	case err != nil && started && r.Context().Err() == nil:
		_ = enc.Encode(map[string]any{"error": ErrBody{Code: "watch_ended", Message: err.Error()}})
	case !started && r.Context().Err() == nil:
		writeCPErr(w, r.Method, err)
	}
}

// CPLeaseRequest is the body of POST /v1/cp/leases.
type CPLeaseRequest struct {
	TTLSeconds int64 `json:"ttlSeconds"`
}

// leases serves grant (POST /v1/cp/leases), keepalive (POST
// /v1/cp/leases/{id}/keepalive) and revoke (DELETE /v1/cp/leases/{id}).
// Keepalives must reach the leader (followers forward).
func (h *cpHandler) leases(w http.ResponseWriter, r *http.Request) {
	var err error
	var body []byte
	var id uint64
	if v := r.PathValue("id"); v != "" {
		if id, err = strconv.ParseUint(v, 10, 64); err != nil || id == 0 {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_lease", "lease", fmt.Sprintf("lease id %q", v)})
			return
		}
	}
	var res any
	switch {
	case r.Method == http.MethodDelete && confined(r):
		// Revoking deletes the lease's keys, in whatever keyspace.
		writeErr(w, &BadRequest{http.StatusForbidden, authz.ResultForbidden, "lease",
			"revoking a lease deletes its keys in any keyspace: a credential confined to keyspaces may not; let the lease expire"})
		return
	case r.Method == http.MethodDelete:
		if err = h.e.RevokeLease(r.Context(), id); err == nil {
			res = map[string]any{"id": id, "revoked": true}
		}
	case id != 0:
		var ttl int64
		if ttl, err = h.e.KeepAlive(r.Context(), id); err == nil {
			res = map[string]any{"id": id, "ttlSeconds": ttl}
		}
	default:
		if body, err = io.ReadAll(io.LimitReader(r.Body, 1<<16)); err != nil {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", err.Error()})
			return
		}
		var req CPLeaseRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", "body: " + err.Error()})
			return
		}
		if req.TTLSeconds < cp.MinLeaseTTLSeconds || req.TTLSeconds > cp.MaxLeaseTTLSeconds {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_ttl", "ttlSeconds", fmt.Sprintf("ttlSeconds must be %d to %d", cp.MinLeaseTTLSeconds, cp.MaxLeaseTTLSeconds)})
			return
		}
		if id, err = h.e.GrantLease(r.Context(), req.TTLSeconds); err == nil {
			writeJSON(w, http.StatusCreated, map[string]any{"id": id, "ttlSeconds": req.TTLSeconds})
			return
		}
	}
	if err == nil {
		writeJSON(w, http.StatusOK, res)
		return
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, r.URL.RequestURI(), body, nl)
		return
	}
	writeCPErr(w, r.Method, err)
}

// CPMemberRequest is the body of POST /admin/v1/cp/members.
type CPMemberRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
}

// ParseCPMember validates an add-voter body.
func ParseCPMember(body []byte) (CPMemberRequest, error) {
	var m CPMemberRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, &BadRequest{http.StatusBadRequest, "invalid_body", "body", "body: " + err.Error()}
	}
	if m.ID == "" || len(m.ID) > MaxKeyBytes {
		return m, &BadRequest{http.StatusBadRequest, "invalid_id", "id", "id must be 1-256 bytes (the node's --node-id)"}
	}
	if _, _, err := net.SplitHostPort(m.RaftAddr); err != nil {
		return m, &BadRequest{http.StatusBadRequest, "invalid_raft_addr", "raftAddr", fmt.Sprintf("raftAddr %q is not host:port", m.RaftAddr)}
	}
	return m, nil
}

// members serves the group's configuration: GET lists it, POST adds a
// voter, DELETE removes a server. Changes run on the leader (forwarded).
func (h *cpHandler) members(w http.ResponseWriter, r *http.Request) {
	var err error
	var body []byte
	switch r.Method {
	case http.MethodGet:
		ms, err := h.e.Members(r.Context())
		if err != nil {
			writeCPErr(w, r.Method, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": ms})
		return
	case http.MethodPost:
		if body, err = io.ReadAll(io.LimitReader(r.Body, 1<<16)); err != nil {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", err.Error()})
			return
		}
		var m CPMemberRequest
		if m, err = ParseCPMember(body); err != nil {
			writeErr(w, err)
			return
		}
		err = h.e.AddVoter(r.Context(), m.ID, m.RaftAddr)
	case http.MethodDelete:
		err = h.e.RemoveServer(r.Context(), r.PathValue("id"))
	}
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, r.URL.RequestURI(), body, nl)
		return
	}
	writeCPErr(w, r.Method, err)
}

func setRevision(w http.ResponseWriter, etag, rev uint64) {
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(etag, 10)))
	w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
}

// serve is GET|PUT|DELETE /v1/cp/{keyspace}/{key}.
func (h *cpHandler) serve(w http.ResponseWriter, r *http.Request) {
	// The keyspace is checked before ParseCP reads a body.
	if _, err := h.keyspace(r); err != nil {
		writeErr(w, err)
		return
	}
	req, err := ParseCP(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	h.do(w, r, req, r.URL.RequestURI())
}

// serveKV is GET|PUT|DELETE /v1/kv/{keyspace}:{key} for a declared
// keyspace: the same request as /v1/cp/{keyspace}/{key}, with the same
// answers. A follower forwards it to the leader in its /v1/cp/ form, so a
// leader that does not declare the keyspace answers 404 instead of
// serving the key from its ring.
func (h *cpHandler) serveKV(w http.ResponseWriter, r *http.Request) {
	req, err := ParseKVAsCP(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	u := url.URL{Path: "/v1/cp/" + req.Keyspace + "/" + req.Key, RawQuery: r.URL.RawQuery}
	h.do(w, r, req, u.RequestURI())
}

// do runs a parsed key request; a follower forwards it to the leader at
// uri.
func (h *cpHandler) do(w http.ResponseWriter, r *http.Request, req CPRequest, uri string) {
	var err error
	switch r.Method {
	case http.MethodGet:
		var e cp.Entry
		if e, err = h.e.Get(r.Context(), req.Keyspace, req.Key, req.Stale); err == nil {
			setRevision(w, e.Revision, e.Revision)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(e.Value)
			return
		}
	case http.MethodPut:
		var e cp.Entry
		if e, err = h.e.Put(r.Context(), req.Keyspace, req.Key, req.Value, req.IfRevision, req.Lease); err == nil {
			setRevision(w, e.Revision, e.Revision)
			writeJSON(w, http.StatusOK, map[string]uint64{"revision": e.Revision})
			return
		}
	case http.MethodDelete:
		var rev uint64
		if rev, err = h.e.Delete(r.Context(), req.Keyspace, req.Key, req.IfRevision); err == nil {
			setRevision(w, 0, rev)
			writeJSON(w, http.StatusOK, map[string]uint64{"revision": rev})
			return
		}
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, uri, req.Value, nl)
		return
	}
	writeCPErr(w, r.Method, err)
}

// forward sends the request to the leader at uri (path and query) and
// relays its answer. Only one hop: the leader answers 503 itself if it has
// lost leadership.
func (h *cpHandler) forward(w http.ResponseWriter, r *http.Request, uri string, body []byte, nl *cp.NotLeaderError) {
	h.forwardThen(w, r, uri, body, nl, nil)
}

// forwardThen is forward, calling settle (when set) with the leader's
// answer before relaying it; an error from settle is answered instead
// (settle writes nothing).
func (h *cpHandler) forwardThen(w http.ResponseWriter, r *http.Request, uri string, body []byte, nl *cp.NotLeaderError, settle func(*http.Response) error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, h.scheme+"://"+nl.LeaderHTTPAddr+uri, bytes.NewReader(body))
	if err != nil {
		writeCPErr(w, r.Method, err)
		return
	}
	out.Header.Set(HeaderForwarded, "1")
	// The leader checks the caller's own credential when it sent one;
	// one that authenticated with its certificate is vouched for by this
	// node's (PeerTLS), this node having checked its keyspaces.
	if v := r.Header.Values("Authorization"); len(v) > 0 {
		out.Header["Authorization"] = v
	} else if p, ok := authn.FromContext(r.Context()); ok {
		out.Header.Set(HeaderOnBehalfOf, p.Author())
	}
	if v := r.Header.Get("If-Match"); v != "" {
		out.Header.Set("If-Match", v)
	}
	resp, err := h.client.Do(out)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			// Never reached the leader: nothing was written.
			writeCPErr(w, r.Method, fmt.Errorf("forwarding to %s: %w", nl.LeaderID, &cp.NotLeaderError{}))
			return
		}
		writeCPErr(w, r.Method, fmt.Errorf("forwarding to %s: %w: %w", nl.LeaderID, cp.ErrUnknownOutcome, err))
		return
	}
	defer resp.Body.Close()
	if settle != nil {
		if err := settle(resp); err != nil {
			writeErr(w, err)
			return
		}
	}
	for _, k := range []string{"Content-Type", "ETag", "Location", HeaderRevision, HeaderLeaderID, HeaderLeaderHTTPAddr, HeaderLeaderRaftAddr} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.Header().Set(HeaderForwarded, nl.LeaderID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// CPLeader is the leader hint in a 503 body.
type CPLeader struct {
	ID       string `json:"id,omitempty"`
	HTTPAddr string `json:"httpAddr,omitempty"`
	RaftAddr string `json:"raftAddr,omitempty"`
}

func writeCPErr(w http.ResponseWriter, method string, err error) {
	var br *BadRequest
	var ce *cp.ConflictError
	var nl *cp.NotLeaderError
	switch {
	case errors.As(err, &br):
		writeErr(w, err)
	case errors.As(err, &ce):
		setRevision(w, ce.Current, ce.Current)
		writeError(w, http.StatusPreconditionFailed, "revision_conflict", err.Error(), "If-Match")
	case errors.Is(err, cp.ErrLeaseNotFound):
		writeError(w, http.StatusNotFound, "lease_not_found", err.Error(), "lease")
	case errors.Is(err, cp.ErrNotFound):
		setRevision(w, 0, 0)
		writeError(w, http.StatusNotFound, "not_found", "no value for key", "key")
	case errors.Is(err, cp.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded) && method != http.MethodGet:
		writeError(w, http.StatusGatewayTimeout, "outcome_unknown", err.Error()+" (the write may or may not have been applied; read back before retrying)", "")
	case errors.As(err, &nl), errors.Is(err, cp.ErrClosed), errors.Is(err, context.DeadlineExceeded):
		code := "no_leader"
		var hint CPLeader
		if nl != nil && nl.LeaderID != "" {
			code = "not_leader"
			hint = CPLeader{ID: nl.LeaderID, HTTPAddr: nl.LeaderHTTPAddr, RaftAddr: nl.LeaderRaftAddr}
			w.Header().Set(HeaderLeaderID, hint.ID)
			w.Header().Set(HeaderLeaderHTTPAddr, hint.HTTPAddr)
			w.Header().Set(HeaderLeaderRaftAddr, hint.RaftAddr)
		}
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error":  ErrBody{Code: code, Message: err.Error() + " (nothing was written)"},
			"leader": hint,
		})
	default:
		writeErr(w, err)
	}
}
