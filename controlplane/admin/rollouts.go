package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/internal/authz"
)

// Rollouts starts and follows wave rollouts; *rollout.Controller implements it.
type Rollouts interface {
	StartOnce(ctx context.Context, key, requestHash string, s rollout.Spec) (rollout.Rollout, bool, error)
	Get(ctx context.Context, id int64) (rollout.Rollout, error)
	List(ctx context.Context, limit int) ([]rollout.Rollout, error)
	Abort(ctx context.Context, id int64) (rollout.Rollout, error)
}

var _ Rollouts = (*rollout.Controller)(nil)

// rolloutRoutes registers /config/rollouts when a controller is configured.
func (h *Handler) rolloutRoutes() {
	if h.rollouts == nil {
		return
	}
	base := Prefix + "/config/rollouts"
	h.Handle("POST "+base, authz.RolloutWrite, h.startRollout)
	h.Handle("GET "+base, authz.ConfigRead, h.listRollouts)
	h.Handle("GET "+base+"/{id}", authz.ConfigRead, h.getRollout)
	h.Handle("POST "+base+"/{id}/abort", authz.RolloutWrite, h.abortRollout)
}

func rolloutError(err error) error {
	switch {
	case errors.Is(err, rollout.ErrRolloutRunning):
		return &Error{Status: http.StatusConflict, Code: "rollout_running", Message: "a rollout is already running; abort it or wait for it to end"}
	case errors.Is(err, rollout.ErrNotRunning):
		return &Error{Status: http.StatusConflict, Code: "rollout_not_running", Message: "the rollout has already ended"}
	case errors.Is(err, rollout.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such rollout"}
	case errors.Is(err, rollout.ErrIdempotencyMismatch):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Message: "this Idempotency-Key was used for a different request"}
	}
	return err
}

func (h *Handler) startRollout(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	m, err := meta(r, body, true)
	if err != nil {
		return err
	}
	if err := jsonObject(body); err != nil {
		return err
	}
	var s rollout.Spec
	if err := decodeStrict(body, &s); err != nil {
		return err
	}
	ro, replayed, err := h.rollouts.StartOnce(r.Context(), m.Idempotency.Key, m.Idempotency.RequestHash, s)
	if err != nil {
		return rolloutError(err)
	}
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	w.Header().Set("Location", Prefix+"/config/rollouts/"+strconv.FormatInt(ro.ID, 10))
	writeJSON(w, http.StatusCreated, ro)
	return nil
}

func (h *Handler) listRollouts(w http.ResponseWriter, r *http.Request) error {
	_, limit, err := page(r)
	if err != nil {
		return err
	}
	items, err := h.rollouts.List(r.Context(), limit)
	if err != nil {
		return rolloutError(err)
	}
	if items == nil {
		items = []rollout.Rollout{}
	}
	writeJSON(w, http.StatusOK, list[rollout.Rollout]{Items: items})
	return nil
}

func rolloutID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such rollout"}
	}
	return id, nil
}

func (h *Handler) getRollout(w http.ResponseWriter, r *http.Request) error {
	id, err := rolloutID(r)
	if err != nil {
		return err
	}
	ro, err := h.rollouts.Get(r.Context(), id)
	if err != nil {
		return rolloutError(err)
	}
	writeJSON(w, http.StatusOK, ro)
	return nil
}

// abortRollout is idempotent: aborting an aborted rollout answers 200 again.
func (h *Handler) abortRollout(w http.ResponseWriter, r *http.Request) error {
	id, err := rolloutID(r)
	if err != nil {
		return err
	}
	ro, err := h.rollouts.Abort(r.Context(), id)
	if errors.Is(err, rollout.ErrNotRunning) && ro.State == rollout.StateAborted {
		err = nil
	}
	if err != nil {
		return rolloutError(err)
	}
	writeJSON(w, http.StatusOK, ro)
	return nil
}
