package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/controlplane/spec"
)

// Sealer encrypts TLS private keys before they reach the store and opens
// them to check a kept key against a new certificate; *seal.Sealer
// implements it.
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

var _ Sealer = (*seal.Sealer)(nil)

// Secret private keys are write-only. The API takes privateKey on create,
// PUT and PATCH, seals it into sealedPrivateKey and clears it, so the store,
// the audit log and the idempotency records only ever hold ciphertext; no
// response shows either field (secretView says hasPrivateKey instead).
//
// PUT and PATCH without privateKey keep the current key: a client cannot
// read the key back, so a full replacement that had to repeat it would
// force clients to keep private keys around. A PUT that switches the secret
// to files or to type ca drops the key. Changing the certificate while
// keeping the key is checked like a new pair (the key is opened for that).

const sealedKeyField = "sealedPrivateKey"

// secretView is a secret as the API shows it.
type secretView struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	Certificate   string            `json:"certificate,omitempty"`
	CA            string            `json:"ca,omitempty"`
	Files         *spec.SecretFiles `json:"files,omitempty"`
	HasPrivateKey bool              `json:"hasPrivateKey,omitempty"`
	// NotAfter is the expiry of the first certificate of certificate or
	// ca, so expired or expiring material is visible (it is accepted).
	NotAfter *time.Time `json:"notAfter,omitempty"`
}

func viewSecret(s *spec.Secret) secretView {
	v := secretView{Name: s.Name, Type: s.Type, Certificate: s.Certificate, CA: s.CA, Files: s.Files,
		HasPrivateKey: s.SealedPrivateKey != "" || s.PrivateKey != ""}
	pemText := s.Certificate
	if pemText == "" {
		pemText = s.CA
	}
	if pemText != "" {
		if certs, err := spec.ParseCertificates(pemText); err == nil {
			t := certs[0].NotAfter.UTC()
			v.NotAfter = &t
		}
	}
	return v
}

// view is what the API shows of a resource: itself, except for secrets.
func view(r spec.Resource) any {
	if s, ok := r.(*spec.Secret); ok {
		return viewSecret(s)
	}
	return r
}

// secretInput prepares a secret request body: a client-supplied
// sealedPrivateKey is refused (only the server writes it), and the
// read-only fields of secretView (hasPrivateKey, notAfter) are dropped, so
// a GET body can be sent back with PUT. Other kinds pass through.
func secretInput(k spec.Kind, body []byte) ([]byte, error) {
	if k != spec.KindSecret {
		return body, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body, nil // spec.Decode reports it
	}
	if _, ok := obj[sealedKeyField]; ok {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: sealedKeyField,
			Message: "is set by the server; send the key as privateKey"}
	}
	_, a := obj["hasPrivateKey"]
	_, b := obj["notAfter"]
	if !a && !b {
		return body, nil
	}
	delete(obj, "hasPrivateKey")
	delete(obj, "notAfter")
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("admin: encode secret: %w", err)
	}
	return out, nil
}

// keepSealedKey adds cur's sealed key to a secret body without privateKey
// that stays an inline tls secret, so validation sees a complete secret.
// It reports whether it did.
func keepSealedKey(body []byte, cur spec.Resource) ([]byte, bool, error) {
	old, ok := cur.(*spec.Secret)
	if !ok || old.SealedPrivateKey == "" {
		return body, false, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body, false, nil
	}
	if raw, ok := obj["privateKey"]; ok && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte(`""`)) {
		return body, false, nil
	}
	var typ string
	if raw, ok := obj["type"]; ok {
		_ = json.Unmarshal(raw, &typ)
	}
	if raw, ok := obj["files"]; typ != spec.SecretTLS || (ok && !bytes.Equal(raw, []byte("null"))) {
		return body, false, nil
	}
	obj[sealedKeyField], _ = json.Marshal(old.SealedPrivateKey)
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, false, fmt.Errorf("admin: encode secret: %w", err)
	}
	return out, true, nil
}

// sealSecret seals a new private key into s, or checks a kept one against
// s's certificate when the certificate changed.
func (h *Handler) sealSecret(s *spec.Secret, kept bool, cur spec.Resource) error {
	switch {
	case s.PrivateKey != "":
		if h.sealer == nil {
			return errNoSealer()
		}
		sealed, err := h.sealer.Seal([]byte(s.PrivateKey))
		if err != nil {
			return fmt.Errorf("admin: seal private key: %w", err)
		}
		s.PrivateKey, s.SealedPrivateKey = "", sealed
	case kept:
		if old, ok := cur.(*spec.Secret); ok && old.Certificate == s.Certificate {
			return nil
		}
		if h.sealer == nil {
			return errNoSealer()
		}
		key, err := h.sealer.Open(s.SealedPrivateKey)
		if err != nil {
			return fmt.Errorf("admin: open kept private key: %w", err)
		}
		if err := spec.CheckKeyPair(s.Certificate, string(key)); err != nil {
			return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: "privateKey",
				Message: "the kept private key does not match the new certificate; send privateKey with it"}
		}
	}
	return nil
}

// warnExpired adds a Warning header when the secret's certificate has
// expired: it is accepted (a replacement may be on its way) but an operator
// should know that Envoy will serve or present a dead certificate.
func (h *Handler) warnExpired(w http.ResponseWriter, s *spec.Secret) {
	if v := viewSecret(s); v.NotAfter != nil && v.NotAfter.Before(h.timeNow()) {
		w.Header().Set("Warning", fmt.Sprintf(`299 portico "certificate expired at %s"`, v.NotAfter.Format(time.RFC3339)))
	}
}

func errNoSealer() error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeInvalid, Field: "privateKey",
		Message: "inline private keys need a secret key on the control plane (--secret-key-file or PORTICO_SECRET_KEY_FILE); " +
			"without one, reference files on the gateway host instead"}
}

// redactDiff removes what the audit API must not show from a diff: the
// kind's Hidden fields, such as API key hashes (not secret, but nothing
// needs them) and private keys (secrets show hasPrivateKey instead).
func redactDiff(k spec.Kind, diff json.RawMessage) json.RawMessage {
	info := k.Info()
	if info == nil || len(info.Hidden) == 0 {
		return diff
	}
	var d map[string]map[string]json.RawMessage
	if err := json.Unmarshal(diff, &d); err != nil {
		return json.RawMessage(`{}`)
	}
	for _, side := range d {
		if side == nil {
			continue
		}
		hadKey := false
		for _, f := range info.Hidden {
			if _, ok := side[f]; ok && (f == sealedKeyField || f == "privateKey") {
				hadKey = true
			}
			delete(side, f)
		}
		if hadKey {
			side["hasPrivateKey"] = json.RawMessage("true")
		}
	}
	out, err := json.Marshal(d)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return out
}
