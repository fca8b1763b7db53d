package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

// nameField is the JSON field holding a resource's name.
func nameField(k spec.Kind) string {
	if d := k.Info(); d != nil {
		return d.NameField
	}
	return "name"
}

func (h *Handler) list(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		cursor, limit, err := page(r)
		if err != nil {
			return err
		}
		items, next, err := h.store.List(r.Context(), k, cursor, limit)
		if err != nil {
			return err
		}
		out := list[any]{Items: make([]any, len(items)), NextCursor: next}
		for i, it := range items {
			out.Items[i] = view(it.Resource)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

func (h *Handler) get(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		res, tag, err := h.store.Get(r.Context(), k, r.PathValue("name"))
		if err != nil {
			return err
		}
		w.Header().Set("ETag", tag)
		writeJSON(w, http.StatusOK, view(res))
		return nil
	}
}

func (h *Handler) create(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
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
		if body, err = secretInput(k, body); err != nil {
			return err
		}
		if body, err = h.providerInput(k, body); err != nil {
			return err
		}
		res, err := spec.Decode(k, body)
		if err != nil {
			return err
		}
		if s, ok := res.(*spec.Secret); ok {
			if err := h.sealSecret(s, false, nil); err != nil {
				return err
			}
		}
		return h.applyOne(w, r, m, store.Change{Kind: k, Name: res.ResourceName(), Resource: res}, http.StatusCreated)
	}
}

// replace is PUT: a full replacement. The body's name may be omitted; if
// present it must equal the path's.
func (h *Handler) replace(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		match, err := ifMatch(r)
		if err != nil {
			return err
		}
		body, err := h.readBody(w, r)
		if err != nil {
			return err
		}
		m, err := meta(r, body, false)
		if err != nil {
			return err
		}
		if err := jsonObject(body); err != nil {
			return err
		}
		body, err = withName(k, name, body)
		if err != nil {
			return err
		}
		if body, err = secretInput(k, body); err != nil {
			return err
		}
		var (
			cur  spec.Resource
			kept bool
		)
		if k == spec.KindSecret {
			// The kept key must come from the revision If-Match names.
			var tag string
			if cur, tag, err = h.store.Get(r.Context(), k, name); err != nil {
				return err
			}
			if match != store.IfMatchAny && match != tag {
				return store.ErrPreconditionFailed
			}
			match = tag
			if body, kept, err = keepSealedKey(body, cur); err != nil {
				return err
			}
		}
		if body, err = h.providerInput(k, body); err != nil {
			return err
		}
		res, err := spec.Decode(k, body)
		if err != nil {
			return err
		}
		if s, ok := res.(*spec.Secret); ok {
			if err := h.sealSecret(s, kept, cur); err != nil {
				return err
			}
		}
		return h.applyOne(w, r, m, store.Change{Kind: k, Name: name, Resource: res, IfMatch: match}, http.StatusOK)
	}
}

// patch is PATCH with a JSON merge patch (RFC 7386) applied to the current
// value; the result is validated like a PUT. The store re-checks If-Match
// atomically, so a concurrent change cannot be lost.
func (h *Handler) patch(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		match, err := ifMatch(r)
		if err != nil {
			return err
		}
		body, err := h.readBody(w, r)
		if err != nil {
			return err
		}
		m, err := meta(r, body, false)
		if err != nil {
			return err
		}
		if err := jsonObject(body); err != nil {
			return err
		}
		cur, tag, err := h.store.Get(r.Context(), k, name)
		if err != nil {
			return err
		}
		if match != store.IfMatchAny && match != tag {
			return store.ErrPreconditionFailed
		}
		if body, err = secretInput(k, body); err != nil {
			return err
		}
		base := cur
		if s, ok := cur.(*spec.Secret); ok {
			// Merge onto the secret without its key; keepSealedKey
			// puts it back unless the patch replaces or drops it.
			c := *s
			c.SealedPrivateKey = ""
			base = &c
		}
		curJSON, err := json.Marshal(base)
		if err != nil {
			return fmt.Errorf("admin: encode %s/%s: %w", k, name, err)
		}
		merged, err := mergePatch(curJSON, body)
		if err != nil {
			return err
		}
		merged, kept, err := keepSealedKey(merged, cur)
		if err != nil {
			return err
		}
		if merged, err = h.providerInput(k, merged); err != nil {
			return err
		}
		res, err := spec.Decode(k, merged)
		if err != nil {
			return err
		}
		if s, ok := res.(*spec.Secret); ok {
			if err := h.sealSecret(s, kept, cur); err != nil {
				return err
			}
		}
		if res.ResourceName() != name {
			return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: nameField(k), Message: "cannot be changed"}
		}
		return h.applyOne(w, r, m, store.Change{Kind: k, Name: name, Resource: res, IfMatch: match}, http.StatusOK)
	}
}

func (h *Handler) remove(k spec.Kind) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		match, err := ifMatch(r)
		if err != nil {
			return err
		}
		m, err := meta(r, nil, false)
		if err != nil {
			return err
		}
		return h.applyOne(w, r, m, store.Change{Kind: k, Name: r.PathValue("name"), IfMatch: match}, http.StatusNoContent)
	}
}

// applyOne writes one change and answers with status: the resource and its
// ETag, or no body for a delete. A PUT or PATCH that changes nothing makes
// no version and answers 200 with the current value.
func (h *Handler) applyOne(w http.ResponseWriter, r *http.Request, m store.Meta, c store.Change, status int) error {
	if s, ok := c.Resource.(*spec.Secret); ok {
		h.warnExpired(w, s)
	}
	var body []byte
	if c.Resource != nil {
		var err error
		// The recorded replay body is the same view: never key material.
		if body, err = json.Marshal(view(c.Resource)); err != nil {
			return fmt.Errorf("admin: encode %s/%s: %w", c.Kind, c.Name, err)
		}
	}
	res, err := h.store.Apply(r.Context(), m, []store.Change{c}, func(int64) (int, []byte) { return status, body })
	if errors.Is(err, store.ErrNoChange) {
		return h.unchanged(w, r, c.Kind, c.Name)
	}
	if err != nil {
		return err
	}
	if res.Replayed {
		if c.Resource != nil {
			w.Header().Set("ETag", store.ETag(res.Version))
		}
		replay(w, res)
		return nil
	}
	setVersion(w, res.Version)
	if c.Resource == nil {
		w.WriteHeader(status)
		return nil
	}
	w.Header().Set("ETag", res.ETags[0])
	writeRaw(w, status, body)
	return nil
}

// unchanged answers a no-op write with the current value and head.
func (h *Handler) unchanged(w http.ResponseWriter, r *http.Request, k spec.Kind, name string) error {
	cur, tag, err := h.store.Get(r.Context(), k, name)
	if err != nil {
		return err
	}
	head, err := h.store.Head(r.Context())
	if err != nil {
		return err
	}
	setVersion(w, head)
	w.Header().Set("ETag", tag)
	writeJSON(w, http.StatusOK, view(cur))
	return nil
}

// replay writes a response recorded under an idempotency key.
func replay(w http.ResponseWriter, res store.Result) {
	setVersion(w, res.Version)
	w.Header().Set(HeaderReplayed, "true")
	if len(res.Body) == 0 {
		w.WriteHeader(res.Status)
		return
	}
	writeRaw(w, res.Status, res.Body)
}

// withName fills the name field of a PUT body from the path, or checks
// that it matches.
func withName(k spec.Kind, name string, body []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return body, nil // spec.Decode reports it with a field
	}
	field := nameField(k)
	if raw, ok := obj[field]; ok && !bytes.Equal(raw, []byte("null")) {
		var got string
		if err := json.Unmarshal(raw, &got); err != nil {
			return body, nil
		}
		if got != "" && got != name {
			return nil, &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: field,
				Message: fmt.Sprintf("%q does not match the name in the path", got)}
		}
	}
	obj[field], _ = json.Marshal(name)
	return json.Marshal(obj)
}

// mergePatch applies an RFC 7386 JSON merge patch to target.
func mergePatch(target, patch []byte) ([]byte, error) {
	decode := func(b []byte) (any, error) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber() // keep integers exact
		var v any
		err := d.Decode(&v)
		return v, err
	}
	t, err := decode(target)
	if err != nil {
		return nil, fmt.Errorf("admin: current value: %w", err)
	}
	p, err := decode(patch)
	if err != nil {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "body is not well-formed JSON"}
	}
	return json.Marshal(merge(t, p))
}

func merge(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
		} else {
			tm[k] = merge(tm[k], v)
		}
	}
	return tm
}
