package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

// Bulk import bounds. DefaultMaxImportBytes fits a million keys with a
// few scopes each; MaxImportKeys bounds one version's size.
const (
	DefaultMaxImportBytes = 512 << 20
	MaxImportKeys         = 2_000_000
	maxKeyPrefixLen       = 16
)

// importRequest is the body of POST /consumers:import. Keys arrive as the
// SHA-256 of their secret only: the import is for migrations from another
// gateway, and the secret never crosses the API. (Minting new keys stays
// with POST /consumers/{name}/keys, whose answer shows the secret once: a
// bulk answer full of secrets could not be replayed and would be one
// large credential dump.)
type importRequest struct {
	Consumers []importConsumer `json:"consumers"`
}

type importConsumer struct {
	Name     string            `json:"name"`
	Tenant   string            `json:"tenant"`
	Tier     string            `json:"tier,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Keys     []importKey       `json:"keys,omitempty"`
}

type importKey struct {
	// ID is the key id; empty derives one from the hash (stable, so the
	// same file imports the same ids, and revealing nothing of the hash).
	ID     string `json:"id,omitempty"`
	SHA256 string `json:"sha256"`
	// Prefix is the non-secret start of the key for operators to tell
	// keys apart (at most maxKeyPrefixLen characters).
	Prefix    string     `json:"prefix,omitempty"`
	Scopes    []string   `json:"scopes,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// importCounts is the answer: counts and the version, never a hash.
type importCounts struct {
	Version   int64              `json:"version"`
	Consumers store.ImportCounts `json:"consumers"`
	Keys      struct {
		Created int `json:"created"`
	} `json:"keys"`
}

// derivedKeyID is the id of an imported key given without one.
func derivedKeyID(sha256Hex string) string {
	sum := sha256.Sum256([]byte("portico/apikey-id\x00" + sha256Hex))
	return "k" + hex.EncodeToString(sum[:12])
}

func (h *Handler) importConsumers(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readImportBody(w, r)
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
	var req importRequest
	if err := decodeStrict(body, &req); err != nil {
		// Find the item at fault: decoding item by item names it.
		return locateDecodeError(body, err)
	}
	consumers, keys, where, err := h.importItems(req)
	if err != nil {
		return err
	}
	res, counts, err := h.store.Import(r.Context(), m, consumers, keys, func(v int64, c store.ImportCounts) (int, []byte) {
		b, _ := json.Marshal(importAnswer(v, c)) //nolint:errchkjson // plain struct of ints
		return http.StatusCreated, b
	})
	if errors.Is(err, store.ErrNoChange) {
		head, herr := h.store.Head(r.Context())
		if herr != nil {
			return herr
		}
		setVersion(w, head)
		writeJSON(w, http.StatusOK, importAnswer(head, store.ImportCounts{ConsumersUnchanged: len(consumers)}))
		return nil
	}
	if err != nil {
		return where.rename(err)
	}
	if res.Replayed {
		replay(w, res)
		return nil
	}
	setVersion(w, res.Version)
	writeJSON(w, http.StatusCreated, importAnswer(res.Version, counts))
	return nil
}

func importAnswer(v int64, c store.ImportCounts) importCounts {
	out := importCounts{Version: v, Consumers: c}
	out.Keys.Created = c.KeysCreated
	return out
}

// readImportBody is readBody with the import's own, larger cap.
func (h *Handler) readImportBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return h.readBodyLimit(w, r, h.maxImport)
}

// itemPaths maps stored names back to where the request gave them, so the
// store's errors ("apikeys/<id>: sha256") name the request's item.
type itemPaths struct {
	consumers map[string]string // name → "consumers[i]"
	keys      map[string]string // id → "consumers[i].keys[j]"
}

func (p itemPaths) rename(err error) error {
	var fe *spec.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	ref, field, ok := strings.Cut(fe.Field, ": ")
	if !ok {
		return err
	}
	kind, name, _ := strings.Cut(ref, "/")
	var path string
	switch spec.Kind(kind) {
	case spec.KindConsumer:
		path = p.consumers[name]
	case spec.KindAPIKey:
		path = p.keys[name]
		if field == "name" {
			field = "id"
		}
	}
	if path == "" {
		return err
	}
	return &spec.FieldError{Field: path + "." + field, Code: fe.Code, Message: fe.Message}
}

// importItems checks the request item by item (errors name the item and
// field) and turns it into resources.
func (h *Handler) importItems(req importRequest) ([]*spec.Consumer, []*spec.APIKey, itemPaths, error) {
	invalid := func(path, code, format string, args ...any) error {
		return &Error{Status: http.StatusUnprocessableEntity, Code: code, Field: path, Message: fmt.Sprintf(format, args...)}
	}
	n := 0
	for _, c := range req.Consumers {
		n += len(c.Keys)
	}
	if len(req.Consumers) == 0 {
		return nil, nil, itemPaths{}, invalid("consumers", spec.CodeRequired, "at least one consumer is required")
	}
	if n > MaxImportKeys {
		return nil, nil, itemPaths{}, invalid("consumers", spec.CodeInvalid, "at most %d keys per import (got %d); split the import", MaxImportKeys, n)
	}
	where := itemPaths{consumers: make(map[string]string, len(req.Consumers)), keys: make(map[string]string, n)}
	hashes := make(map[string]string, n)
	consumers := make([]*spec.Consumer, 0, len(req.Consumers))
	keys := make([]*spec.APIKey, 0, n)
	now := h.timeNow()
	for i, ic := range req.Consumers {
		cp := fmt.Sprintf("consumers[%d]", i)
		c := &spec.Consumer{Name: ic.Name, Tenant: ic.Tenant, Tier: ic.Tier, Metadata: ic.Metadata}
		if err := c.Validate(); err != nil {
			return nil, nil, where, pathed(cp, err)
		}
		if other, dup := where.consumers[c.Name]; dup {
			return nil, nil, where, invalid(cp+".name", spec.CodeConflict, "consumer %q is also %s", c.Name, other)
		}
		where.consumers[c.Name] = cp
		consumers = append(consumers, c)
		for j, ik := range ic.Keys {
			kp := fmt.Sprintf("%s.keys[%d]", cp, j)
			hash := strings.ToLower(ik.SHA256)
			if len(hash) != 64 || !isHex(hash) {
				return nil, nil, where, invalid(kp+".sha256", spec.CodeInvalid, "must be the SHA-256 of the key's secret, 64 hex digits")
			}
			id := ik.ID
			if id == "" {
				id = derivedKeyID(hash)
			}
			if len(ik.Prefix) > maxKeyPrefixLen {
				return nil, nil, where, invalid(kp+".prefix", spec.CodeInvalid, "must be at most %d characters (never the whole secret)", maxKeyPrefixLen)
			}
			for s, scope := range ik.Scopes {
				if scope == "" || strings.ContainsAny(scope, " ,") {
					return nil, nil, where, invalid(fmt.Sprintf("%s.scopes[%d]", kp, s), spec.CodeInvalid, "must be a non-empty scope without spaces or commas")
				}
			}
			if ik.ExpiresAt != nil && !ik.ExpiresAt.After(now) {
				return nil, nil, where, invalid(kp+".expiresAt", spec.CodeInvalid, "must be in the future")
			}
			k := &spec.APIKey{Name: id, Consumer: c.Name, SHA256: hash, Prefix: ik.Prefix, Scopes: ik.Scopes, ExpiresAt: ik.ExpiresAt}
			if err := k.Validate(); err != nil {
				err = pathed(kp, err)
				var fe *spec.FieldError
				if errors.As(err, &fe) && fe.Field == kp+".name" {
					fe.Field = kp + ".id"
				}
				return nil, nil, where, err
			}
			if other, dup := where.keys[id]; dup {
				return nil, nil, where, invalid(kp+".id", spec.CodeConflict, "key id %q is also %s", id, other)
			}
			if other, dup := hashes[hash]; dup {
				return nil, nil, where, invalid(kp+".sha256", spec.CodeConflict, "the same hash as %s", other)
			}
			where.keys[id], hashes[hash] = kp, kp
			keys = append(keys, k)
		}
	}
	return consumers, keys, where, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// pathed puts the item path before a resource's field error.
func pathed(path string, err error) error {
	var fe *spec.FieldError
	if errors.As(err, &fe) {
		return &spec.FieldError{Field: path + "." + fe.Field, Code: fe.Code, Message: fe.Message}
	}
	return err
}

// locateDecodeError re-decodes the request item by item, strictly, to
// name the item a whole-body decoding error (an unknown field, a wrong
// type) came from. It runs only on bad input.
func locateDecodeError(body []byte, err error) error {
	var top struct {
		Consumers []json.RawMessage `json:"consumers"`
	}
	if json.Unmarshal(body, &top) != nil {
		return err
	}
	for i, raw := range top.Consumers {
		cp := fmt.Sprintf("consumers[%d]", i)
		var c struct {
			importConsumer
			Keys []json.RawMessage `json:"keys"`
		}
		if e := decodeStrict(raw, &c); e != nil {
			return withPath(cp, e)
		}
		for j, kraw := range c.Keys {
			var k importKey
			if e := decodeStrict(kraw, &k); e != nil {
				return withPath(fmt.Sprintf("%s.keys[%d]", cp, j), e)
			}
		}
	}
	return err
}

func withPath(path string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		out := *e
		out.Field = path
		if e.Field != "" {
			out.Field += "." + e.Field
		}
		return &out
	}
	return err
}

// readBodyLimit is readBody with an explicit cap.
func (h *Handler) readBodyLimit(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := checkContentType(r); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	return body, nil
}
