package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/authn"
)

// Header value bounds; longer values are rejected rather than truncated.
const (
	maxAuthorLen         = 256
	maxReasonLen         = 1024
	maxIdempotencyKeyLen = 255
)

// writeJSON writes v with status. Encoding our own types cannot fail; if it
// somehow does, the client gets a bare 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client is gone; nothing to do
}

// readBody reads the whole body up to the handler's cap. An empty body is
// returned as nil. Content-Type, when present, must be JSON — or curl's
// default for -d (application/x-www-form-urlencoded), so that the documented
// `curl -d '{...}'` commands work; the body is parsed as strict JSON anyway.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return h.readBodyLimit(w, r, h.maxBody)
}

// checkContentType refuses a Content-Type that is not JSON (or curl's -d
// default; see readBody).
func checkContentType(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json") && mt != "application/x-www-form-urlencoded") {
			return &Error{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType, Message: "Content-Type must be application/json"}
		}
	}
	return nil
}

// jsonObject checks that body is well-formed JSON (400 otherwise) holding an
// object (422 otherwise).
func jsonObject(body []byte) error {
	if body == nil {
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "a JSON object body is required"}
	}
	if !json.Valid(body) {
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "body is not well-formed JSON"}
	}
	if bytes.TrimSpace(body)[0] != '{' {
		return &Error{Status: http.StatusUnprocessableEntity, Code: "invalid", Message: "body must be a JSON object"}
	}
	return nil
}

// meta reads author and reason, and the idempotency key when required (or
// offered).
func meta(r *http.Request, body []byte, requireKey bool) (store.Meta, error) {
	// The author is who the caller proved to be; what it says about itself
	// is only a note beside that.
	p, _ := authn.FromContext(r.Context())
	m := store.Meta{Author: p.Author(), Note: r.Header.Get(HeaderAuthor), Reason: r.Header.Get(HeaderReason)}
	if len(m.Note) > maxAuthorLen {
		return m, badParam(HeaderAuthor, "must be at most 256 bytes")
	}
	if len(m.Reason) > maxReasonLen {
		return m, badParam(HeaderReason, "must be at most 1024 bytes")
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	switch {
	case key == "" && requireKey:
		return m, errMissingIdempotencyKey()
	case len(key) > maxIdempotencyKeyLen:
		return m, badParam(HeaderIdempotencyKey, "must be at most 255 bytes")
	case key != "":
		// Keys are scoped to the caller: another principal reusing a key
		// neither replays nor blocks this one's request.
		who := p.String()
		m.Idempotency = &store.Idempotency{Key: fmt.Sprintf("%d:%s/%s", len(who), who, key), Method: r.Method, Path: r.URL.Path, RequestHash: requestHash(body)}
	}
	return m, nil
}

// requestHash identifies a request body for idempotency; insignificant
// whitespace does not count.
func requestHash(body []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, body) == nil {
		body = buf.Bytes()
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// ifMatch returns the required If-Match value (428 when missing).
func ifMatch(r *http.Request) (string, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return "", errMissingIfMatch()
	}
	return v, nil
}

// page reads ?limit= (default and cap from the store) and ?cursor=.
func page(r *http.Request) (cursor string, limit int, err error) {
	q := r.URL.Query()
	if s := q.Get("limit"); s != "" {
		limit, err = strconv.Atoi(s)
		if err != nil || limit < 1 {
			return "", 0, badParam("limit", "must be a positive integer")
		}
		limit = min(limit, store.MaxPageSize)
	}
	return q.Get("cursor"), limit, nil
}

// numericCursor parses a version or audit id cursor ("" = from the newest).
func numericCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, badParam("cursor", "invalid cursor")
	}
	return n, nil
}

// list is the list envelope.
type list[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor"`
}

func setVersion(w http.ResponseWriter, v int64) {
	w.Header().Set(HeaderConfigVersion, strconv.FormatInt(v, 10))
}
