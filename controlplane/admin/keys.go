package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

// API key secrets are "pk_" and 32 random bytes in unpadded base64url. The
// first keyPrefixLen characters are kept (not secret) so operators can tell
// keys apart.
const (
	keySecretPrefix = "pk_"
	keyPrefixLen    = 8
)

// keyRequest is the optional body of POST /consumers/{name}/keys.
type keyRequest struct {
	Scopes    []string   `json:"scopes,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// keyView is an API key as the API shows it: never the secret, never the hash.
type keyView struct {
	ID        string     `json:"id"`
	Consumer  string     `json:"consumer"`
	Prefix    string     `json:"prefix"`
	Scopes    []string   `json:"scopes,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// ETag is set in listings, where there is no per-item header.
	ETag string `json:"etag,omitempty"`
}

func viewKey(k *spec.APIKey) keyView {
	return keyView{ID: k.Name, Consumer: k.Consumer, Prefix: k.Prefix, Scopes: k.Scopes, ExpiresAt: k.ExpiresAt}
}

// createdKey is the answer to a key creation. Key (the secret) is in the
// first answer only. The response recorded for idempotent replay has no
// secret (nothing stores it, in any form but its hash) and says
// keyShownOnce instead: a client that lost the first answer must revoke
// that key id and create another.
type createdKey struct {
	keyView
	Key          string `json:"key,omitempty"`
	KeyShownOnce bool   `json:"keyShownOnce,omitempty"`
}

// newKey returns a key id and secret from crypto/rand.
func newKey() (id, secret string, err error) {
	var b [8 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("admin: random key: %w", err)
	}
	return hex.EncodeToString(b[:8]), keySecretPrefix + base64.RawURLEncoding.EncodeToString(b[8:]), nil
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) error {
	consumer := r.PathValue("name")
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	m, err := meta(r, body, true)
	if err != nil {
		return err
	}
	var req keyRequest
	if body != nil {
		if err := jsonObject(body); err != nil {
			return err
		}
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
	}
	for i, s := range req.Scopes {
		if s == "" || strings.ContainsAny(s, " ,") {
			return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: fmt.Sprintf("scopes[%d]", i),
				Message: "must be a non-empty scope without spaces or commas"}
		}
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(h.timeNow()) {
		return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: "expiresAt", Message: "must be in the future"}
	}
	if _, _, err := h.store.Get(r.Context(), spec.KindConsumer, consumer); err != nil {
		return err
	}
	id, secret, err := newKey()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(secret))
	key := &spec.APIKey{Name: id, Consumer: consumer, SHA256: hex.EncodeToString(sum[:]),
		Prefix: secret[:keyPrefixLen], Scopes: req.Scopes, ExpiresAt: req.ExpiresAt}
	recorded, err := json.Marshal(createdKey{keyView: viewKey(key), KeyShownOnce: true})
	if err != nil {
		return fmt.Errorf("admin: encode key: %w", err)
	}
	res, err := h.store.CreateAPIKey(r.Context(), m, key, func(int64) (int, []byte) { return http.StatusCreated, recorded })
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("ETag", store.ETag(res.Version))
	if res.Replayed {
		replay(w, res)
		return nil
	}
	setVersion(w, res.Version)
	writeJSON(w, http.StatusCreated, createdKey{keyView: viewKey(key), Key: secret})
	return nil
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) error {
	consumer := r.PathValue("name")
	cursor, limit, err := page(r)
	if err != nil {
		return err
	}
	if _, _, err := h.store.Get(r.Context(), spec.KindConsumer, consumer); err != nil {
		return err
	}
	items, next, err := h.store.ListAPIKeys(r.Context(), consumer, cursor, limit)
	if err != nil {
		return err
	}
	out := list[keyView]{Items: make([]keyView, len(items)), NextCursor: next}
	for i, it := range items {
		out.Items[i] = viewKey(it.Resource.(*spec.APIKey))
		out.Items[i].ETag = it.ETag
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// consumerKey returns key id if it belongs to the consumer in the path.
func (h *Handler) consumerKey(r *http.Request) (*spec.APIKey, string, error) {
	res, tag, err := h.store.Get(r.Context(), spec.KindAPIKey, r.PathValue("id"))
	if err != nil {
		return nil, "", err
	}
	k := res.(*spec.APIKey)
	if k.Consumer != r.PathValue("name") {
		return nil, "", store.ErrNotFound
	}
	return k, tag, nil
}

func (h *Handler) getKey(w http.ResponseWriter, r *http.Request) error {
	k, tag, err := h.consumerKey(r)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", tag)
	writeJSON(w, http.StatusOK, viewKey(k))
	return nil
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) error {
	match, err := ifMatch(r)
	if err != nil {
		return err
	}
	m, err := meta(r, nil, false)
	if err != nil {
		return err
	}
	k, _, err := h.consumerKey(r)
	if err != nil {
		return err
	}
	return h.applyOne(w, r, m, store.Change{Kind: spec.KindAPIKey, Name: k.Name, IfMatch: match}, http.StatusNoContent)
}

// decodeStrict decodes a JSON object into v, refusing unknown fields and
// trailing data, with errors naming the field (422).
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after JSON object")
	}
	if err == nil {
		return nil
	}
	e := &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Message: err.Error()}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		e.Field, e.Message = te.Field, "must be "+te.Type.String()
	} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		e.Field, e.Message = strings.Trim(f, `"`), "unknown field"
	}
	return e
}
