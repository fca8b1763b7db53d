package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// POST /admin/v1/config:apply is declarative configuration (porticoctl
// apply): a list of desired resources, and deletions, checked together and
// written as ONE config version. Each item states an end state — a put
// creates or replaces, a delete of an absent resource is a no-op — so
// applying the same files twice makes no second version (200, "unchanged").
// Prune names kinds whose live resources the items do not name are
// deleted in the same version. ?dryRun=true checks everything the real
// apply checks (each resource, the whole config after the change, the
// deployment's rules) and answers the diff without storing anything.
//
// Permissions: config.write for the route; a batch that touches the
// security kinds (secrets, JWT providers, revocations), by item or by
// prune, also needs security.write. Secrets follow PUT's rules: privateKey
// is sealed, and an inline tls secret without one keeps its current key.
// The answer is the diff; secrets' keys never appear in it.
//
// Idempotency-Key is required unless dryRun; a replay answers the version
// the first request made (result, version, baseVersion) without its diff.

// ApplyPath is the endpoint, under Prefix.
const ApplyPath = "/config:apply"

// MaxApplyBytes caps a batch's body: a whole config in one request (ten
// thousand routes are a few MiB), more than the other endpoints' cap.
const MaxApplyBytes = 32 << 20

// ApplyRequest is the body of POST /config:apply.
type ApplyRequest struct {
	Items []ApplyItem `json:"items"`
	// Prune lists kinds whose live resources not named by Items are deleted.
	Prune []spec.Kind `json:"prune,omitempty"`
}

// ApplyItem is one desired resource, or one deletion.
type ApplyItem struct {
	Kind spec.Kind `json:"kind"`
	// Name defaults to the resource's name field (jti for revocations);
	// required with Delete.
	Name     string          `json:"name,omitempty"`
	Resource json.RawMessage `json:"resource,omitempty"`
	Delete   bool            `json:"delete,omitempty"`
	// IfMatch, when set, is the ETag the resource must have (a
	// compare-and-swap inside the batch); by default the item is applied
	// whatever the current revision.
	IfMatch string `json:"ifMatch,omitempty"`
}

// Apply results.
const (
	ApplyApplied   = "applied"
	ApplyUnchanged = "unchanged"
	ApplyPlanned   = "planned"
)

// ApplyResponse is the answer of POST /config:apply.
type ApplyResponse struct {
	// Result is ApplyApplied (a version was made), ApplyUnchanged (the
	// live config already matches) or ApplyPlanned (a dry run).
	Result string `json:"result"`
	DryRun bool   `json:"dryRun,omitempty"`
	// Version is the version the apply made (0 otherwise).
	Version int64 `json:"version,omitempty"`
	// BaseVersion is the version the diff is against.
	BaseVersion int64         `json:"baseVersion"`
	Changes     []ApplyChange `json:"changes"`
	// Unchanged counts the items equal to the live config.
	Unchanged int `json:"unchanged"`
}

// ApplyChange is one resource the apply changes: its JSON before and after
// (absent for a create and a delete respectively). Action is create,
// update or delete.
type ApplyChange struct {
	Kind   spec.Kind       `json:"kind"`
	Name   string          `json:"name"`
	Action string          `json:"action"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// securityKind reports whether changing k needs security.write.
func securityKind(k spec.Kind) bool {
	_, write := kindPermissions(k)
	return write == authz.SecurityWrite
}

func (h *Handler) applyConfig(w http.ResponseWriter, r *http.Request) error {
	dry := false
	if s := r.URL.Query().Get("dryRun"); s != "" {
		var err error
		if dry, err = strconv.ParseBool(s); err != nil {
			return badParam("dryRun", "must be true or false")
		}
	}
	body, err := h.readBodyLimit(w, r, max(h.maxBody, MaxApplyBytes))
	if err != nil {
		return err
	}
	m, err := meta(r, body, !dry)
	if err != nil {
		return err
	}
	if err := jsonObject(body); err != nil {
		return err
	}
	var req ApplyRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	if len(req.Items) == 0 && len(req.Prune) == 0 {
		return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeRequired, Field: "items", Message: "name at least one resource (or kinds to prune)"}
	}
	security := false
	for i, it := range req.Items {
		if !slices.Contains(managedKinds, it.Kind) {
			return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: fmt.Sprintf("items[%d].kind", i),
				Message: fmt.Sprintf("unknown kind %q", it.Kind)}
		}
		security = security || securityKind(it.Kind)
	}
	for i, k := range req.Prune {
		if !slices.Contains(managedKinds, k) {
			return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: fmt.Sprintf("prune[%d]", i),
				Message: fmt.Sprintf("unknown kind %q", k)}
		}
		security = security || securityKind(k)
	}
	if p, _ := authn.FromContext(r.Context()); security && !authz.Allowed(p, authz.SecurityWrite) {
		return &Error{Status: http.StatusForbidden, Code: authz.ResultForbidden,
			Message: "this batch changes secrets, JWT providers or revocations: it needs security.write"}
	}

	changes := make([]store.Change, 0, len(req.Items))
	named := map[[2]string]bool{}
	for i, it := range req.Items {
		c, err := h.itemChange(r, i, it)
		if err != nil {
			return err
		}
		changes = append(changes, c)
		named[[2]string{string(c.Kind), c.Name}] = true
	}
	for _, k := range req.Prune {
		for after := ""; ; {
			items, next, err := h.store.List(r.Context(), k, after, store.MaxPageSize)
			if err != nil {
				return err
			}
			for _, it := range items {
				if n := it.Resource.ResourceName(); !named[[2]string{string(k), n}] {
					changes = append(changes, store.Change{Kind: k, Name: n, IfMatch: store.IfMatchUpsert})
				}
			}
			if next == "" {
				break
			}
			after = next
		}
	}

	var res store.Result
	if dry {
		res, err = h.store.Plan(r.Context(), changes)
	} else {
		res, err = h.store.Apply(r.Context(), m, changes, func(v int64) (int, []byte) {
			b, _ := json.Marshal(ApplyResponse{Result: ApplyApplied, Version: v, BaseVersion: v - 1, Changes: []ApplyChange{}}) // cannot fail
			return http.StatusCreated, b
		})
	}
	if errors.Is(err, store.ErrNoChange) {
		head, err := h.store.Head(r.Context())
		if err != nil {
			return err
		}
		setVersion(w, head)
		writeJSON(w, http.StatusOK, ApplyResponse{Result: ApplyUnchanged, DryRun: dry, BaseVersion: head,
			Changes: []ApplyChange{}, Unchanged: len(req.Items)})
		return nil
	}
	if err != nil {
		return err
	}
	if res.Replayed {
		replay(w, res)
		return nil
	}
	out := ApplyResponse{Result: ApplyApplied, DryRun: dry, Version: res.Version, BaseVersion: res.Base,
		Changes: make([]ApplyChange, len(res.Diffs))}
	changed := map[[2]string]bool{}
	for i, d := range res.Diffs {
		out.Changes[i] = viewDiff(d)
		changed[[2]string{string(d.Kind), d.Name}] = true
	}
	for _, c := range changes[:len(req.Items)] {
		if !changed[[2]string{string(c.Kind), c.Name}] {
			out.Unchanged++
		}
	}
	status := http.StatusCreated
	if dry {
		out.Result, status = ApplyPlanned, http.StatusOK
		setVersion(w, res.Base)
	} else {
		setVersion(w, res.Version)
	}
	writeJSON(w, status, out)
	return nil
}

// itemChange turns item i into a store change, preparing its resource as
// PUT does. Errors name the item: "clusters/echo: endpoints[0].port".
func (h *Handler) itemChange(r *http.Request, i int, it ApplyItem) (store.Change, error) {
	k := it.Kind
	match := it.IfMatch
	if match == "" {
		match = store.IfMatchUpsert
	}
	if it.Delete {
		if it.Name == "" {
			return store.Change{}, &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeRequired, Field: fmt.Sprintf("items[%d].name", i), Message: "is required to delete"}
		}
		if len(it.Resource) > 0 {
			return store.Change{}, &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: fmt.Sprintf("items[%d].resource", i), Message: "a delete carries no resource"}
		}
		return store.Change{Kind: k, Name: it.Name, IfMatch: match}, nil
	}
	body := []byte(it.Resource)
	if err := jsonObject(body); err != nil {
		return store.Change{}, &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: fmt.Sprintf("items[%d].resource", i), Message: "must be a JSON object"}
	}
	name := it.Name
	if name == "" {
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(body, &obj)
		_ = json.Unmarshal(obj[nameField(k)], &name)
	}
	ref := fmt.Sprintf("items[%d]", i)
	if name != "" {
		ref = string(k) + "/" + name
		var err error
		if body, err = withName(k, name, body); err != nil {
			return store.Change{}, itemError(ref, err)
		}
	}
	body, err := secretInput(k, body)
	if err != nil {
		return store.Change{}, itemError(ref, err)
	}
	var (
		cur  spec.Resource
		kept bool
	)
	if k == spec.KindSecret && name != "" {
		var tag string
		cur, tag, err = h.store.Get(r.Context(), k, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return store.Change{}, err
		default:
			// The kept key must be the one of the revision it was read at.
			if body, kept, err = keepSealedKey(body, cur); err != nil {
				return store.Change{}, err
			}
			if kept && it.IfMatch == "" {
				match = tag
			}
		}
	}
	if body, err = h.providerInput(k, body); err != nil {
		return store.Change{}, itemError(ref, err)
	}
	res, err := spec.Decode(k, body)
	if err != nil {
		return store.Change{}, itemError(ref, err)
	}
	if s, ok := res.(*spec.Secret); ok {
		if err := h.sealSecret(s, kept, cur); err != nil {
			return store.Change{}, itemError(ref, err)
		}
	}
	return store.Change{Kind: k, Name: res.ResourceName(), Resource: res, IfMatch: match}, nil
}

// itemError prefixes a validation error's field with the item it is about.
func itemError(ref string, err error) error {
	prefix := func(f string) string {
		if f == "" {
			return ref
		}
		return ref + ": " + f
	}
	var (
		fe *spec.FieldError
		ae *Error
	)
	switch {
	case errors.As(err, &fe):
		return &spec.FieldError{Field: prefix(fe.Field), Code: fe.Code, Message: fe.Message}
	case errors.As(err, &ae):
		c := *ae
		c.Field = prefix(ae.Field)
		return &c
	}
	return err
}

// viewDiff shows a store diff without key material.
func viewDiff(d store.Diff) ApplyChange {
	c := ApplyChange{Kind: d.Kind, Name: d.Name, Action: d.Action}
	raw := func(b []byte) json.RawMessage {
		if b == nil {
			return nil
		}
		return b
	}
	full, err := json.Marshal(struct {
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}{raw(d.Before), raw(d.After)})
	if err != nil {
		return c
	}
	var red struct {
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}
	if json.Unmarshal(redactDiff(d.Kind, full), &red) != nil {
		return c
	}
	if d.Before != nil {
		c.Before = red.Before
	}
	if d.After != nil {
		c.After = red.After
	}
	return c
}
