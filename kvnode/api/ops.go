package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/kvnode/cp"
)

// Day-2 operations (issue 23), every one cluster.admin: a backup holds
// every key of the node, so reading one is an admin's act, not a viewer's.
//
//	POST /admin/v1/backup        this node's ring data: a tar of a pebble checkpoint (Ops.Backup)
//	POST /admin/v1/restore       load a backup's entries into this cluster (Ops.Load)
//	POST /admin/v1/cleanup       drop the ranges this node no longer replicates (Ops.Cleanup)
//	POST /admin/v1/replace       this new node takes a dead node's tokens (Ops.Replace)
//	POST /admin/v1/cp/snapshot   the consensus tier's state, from the leader (forwarded)
//	POST /admin/v1/cp/restore    replace the consensus tier's state with a snapshot (leader)

// MaxSnapshotBytes bounds a consensus-tier snapshot sent for restore: the
// tier's state lives in memory, so a snapshot is as large as that state.
const MaxSnapshotBytes = 256 << 20

// Ops is the node's day-2 surface.
type Ops interface {
	// Backup takes a consistent copy of the node's ring data now; the
	// caller streams it with WriteTo and must Close it.
	Backup(ctx context.Context) (Archive, error)
	// Load writes every entry of a backup stream (varint-delimited
	// kvv1.Entry messages) to its replicas in this cluster.
	Load(ctx context.Context, r io.Reader) (LoadResult, error)
	// Cleanup deletes the data this node no longer replicates.
	Cleanup(ctx context.Context) (CleanupResult, error)
	// Replace makes this node (new, without tokens) take over the tokens
	// of dead node dead, stream its ranges and verify them by repair.
	Replace(ctx context.Context, dead string) (ReplaceResult, error)
}

// Archive is a backup being streamed.
type Archive interface {
	io.WriterTo
	io.Closer
}

// Errors of the operations that map to 409 (the cluster's state does not
// allow the operation now; retrying later may succeed). Anything else is 500.
var ErrConflict = errors.New("kvnode: not possible in the cluster's current state")

// ReplaceRequest is the body of POST /admin/v1/replace.
type ReplaceRequest struct {
	// Node is the id of the dead node whose tokens this node takes.
	Node string `json:"node"`
}

// ParseReplace validates a replace body.
func ParseReplace(body io.Reader) (ReplaceRequest, error) {
	var req ReplaceRequest
	dec := json.NewDecoder(io.LimitReader(body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, &BadRequest{http.StatusBadRequest, "invalid_body", "node", "body: " + err.Error()}
	}
	if req.Node == "" || len(req.Node) > MaxKeyBytes {
		return req, &BadRequest{http.StatusBadRequest, "invalid_node", "node", "node must be the dead node's id (1-256 bytes)"}
	}
	return req, nil
}

func mountOps(rt *routeTable, ops Ops) {
	rt.handle("POST /admin/v1/backup", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) {
		a, err := ops.Backup(r.Context())
		if err != nil {
			opsError(w, err)
			return
		}
		defer a.Close()
		w.Header().Set("Content-Type", "application/x-tar")
		w.WriteHeader(http.StatusOK)
		// A failure past this point cuts the stream: the tar then lacks
		// its end marker, which the reader reports.
		_, _ = a.WriteTo(w)
	})
	rt.handle("POST /admin/v1/restore", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) {
		opsResult[LoadResult](w)(ops.Load(r.Context(), r.Body))
	})
	rt.handle("POST /admin/v1/cleanup", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) {
		opsResult[CleanupResult](w)(ops.Cleanup(r.Context()))
	})
	rt.handle("POST /admin/v1/replace", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) {
		req, err := ParseReplace(r.Body)
		if err != nil {
			writeErr(w, err)
			return
		}
		opsResult[ReplaceResult](w)(ops.Replace(r.Context(), req.Node))
	})
}

func opsResult[T any](w http.ResponseWriter) func(T, error) {
	return func(res T, err error) {
		if err != nil {
			opsError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

func opsError(w http.ResponseWriter, err error) {
	var br *BadRequest
	switch {
	case errors.As(err, &br):
		writeErr(w, err)
	case errors.Is(err, ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error(), "")
	default:
		writeError(w, http.StatusInternalServerError, "failed", err.Error(), "")
	}
}

// snapshot is POST /admin/v1/cp/snapshot: the leader's snapshot of the
// tier, covering every write acknowledged before the request
// (X-KV-Revision: the revision it covers). A follower forwards.
func (h *cpHandler) snapshot(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	rev, err := h.e.SaveSnapshot(r.Context(), &buf)
	if err == nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(buf.Bytes())
		return
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, r.URL.RequestURI(), nil, nl)
		return
	}
	writeCPErr(w, http.MethodGet, err)
}

// restore is POST /admin/v1/cp/restore: the body (a snapshot from
// /admin/v1/cp/snapshot, of this cluster or another) replaces the tier's
// state. A follower forwards; a snapshot that does not decode is 400 and
// changes nothing.
func (h *cpHandler) restore(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxSnapshotBytes+1))
	if err != nil {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", err.Error()})
		return
	}
	if len(body) > MaxSnapshotBytes {
		writeErr(w, &BadRequest{http.StatusRequestEntityTooLarge, "snapshot_too_large", "body", fmt.Sprintf("snapshot over %d bytes", MaxSnapshotBytes)})
		return
	}
	rev, err := h.e.RestoreSnapshot(r.Context(), body)
	if err == nil {
		w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
		writeJSON(w, http.StatusOK, map[string]uint64{"revision": rev})
		return
	}
	var nl *cp.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "" {
		h.forward(w, r, r.URL.RequestURI(), body, nl)
		return
	}
	if errors.Is(err, cp.ErrBadSnapshot) {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_snapshot", "body", err.Error()})
		return
	}
	writeCPErr(w, http.MethodPost, err)
}
