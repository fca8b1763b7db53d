// Package kubesecrettest is a stand-in for the few Kubernetes API endpoints
// package kubesecret calls (GET, POST and PUT of core/v1 Secrets in one
// namespace), served over TLS by httptest.
//
// It checks OUR requests — method, path, bearer token, content type, the
// body's apiVersion, kind, namespace, name and resourceVersion — and
// answers with the status codes and metav1.Status reasons the real API
// server documents for those cases (404 NotFound, 409 AlreadyExists, 409
// Conflict, 401, 403, 422 for a changed Secret type). It is not Kubernetes:
// no admission, no validation of Secret contents, no RBAC beyond the
// Allowed hook, no watch or list. Anything else it receives is recorded as
// unexpected, and the test that owns it fails.
package kubesecrettest

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
)

// Request is one call the server received.
type Request struct {
	Method, Path string
	Name         string             // the Secret addressed ("" for the collection)
	Body         *kubesecret.Secret // decoded body of POST and PUT
}

// Server is a fake API server holding the Secrets of one namespace. Safe
// for concurrent use.
type Server struct {
	*httptest.Server
	Namespace string
	Token     string

	// Allowed, when set, says whether the caller may run verb ("get",
	// "create", "update") on Secret name ("" for create): a Role in
	// miniature. Denied calls get 403.
	Allowed func(verb, name string) bool
	// BeforeWrite, when set, runs before a POST or PUT is applied (tests
	// use it to change the store under the caller).
	BeforeWrite func(r Request)

	t       testing.TB
	mu      sync.Mutex
	secrets map[string]kubesecret.Secret
	reqs    []Request
	version int
}

// New starts a server for namespace whose callers must present token; it
// is closed when the test ends.
func New(t testing.TB, namespace, token string) *Server {
	s := &Server{Namespace: namespace, Token: token, t: t, secrets: map[string]kubesecret.Secret{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// ServiceAccountDir writes what Kubernetes mounts into a pod (token,
// ca.crt of this server, namespace) into a new directory and returns it.
func (s *Server) ServiceAccountDir(t testing.TB) string {
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	for name, data := range map[string][]byte{"token": []byte(s.Token + "\n"), "ca.crt": ca, "namespace": []byte(s.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// HostPort returns the server's host and port, for KUBERNETES_SERVICE_HOST
// and KUBERNETES_SERVICE_PORT.
func (s *Server) HostPort() (string, string) {
	u, _ := url.Parse(s.URL)
	return u.Hostname(), u.Port()
}

// Put stores a Secret directly (as another writer would), assigning it a
// new resourceVersion.
func (s *Server) Put(sec kubesecret.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(sec)
}

func (s *Server) putLocked(sec kubesecret.Secret) kubesecret.Secret {
	s.version++
	sec.APIVersion, sec.Kind = "v1", "Secret"
	sec.Metadata.Namespace = s.Namespace
	sec.Metadata.ResourceVersion = strconv.Itoa(s.version)
	s.secrets[sec.Metadata.Name] = sec
	return sec
}

// Secret returns the stored Secret name.
func (s *Server) Secret(name string) (kubesecret.Secret, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[name]
	return sec, ok
}

// Requests returns the calls received so far and forgets them.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.reqs
	s.reqs = nil
	return out
}

func (s *Server) fail(format string, a ...any) {
	s.t.Errorf("kubesecrettest: unexpected request: "+format, a...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || r.TLS.Version < tls.VersionTLS12 {
		s.fail("not over TLS 1.2+")
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+s.Token {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", "bad bearer token")
		return
	}
	if a := r.Header.Get("Accept"); a != "application/json" {
		s.fail("%s %s: Accept %q", r.Method, r.URL.Path, a)
	}
	collection := "/api/v1/namespaces/" + s.Namespace + "/secrets"
	name, ok := strings.CutPrefix(r.URL.Path, collection)
	if !ok || (name != "" && (!strings.HasPrefix(name, "/") || strings.Contains(name[1:], "/"))) || r.URL.RawQuery != "" {
		s.fail("%s %s?%s: not a Secret of namespace %s", r.Method, r.URL.Path, r.URL.RawQuery, s.Namespace)
		writeStatus(w, http.StatusNotFound, "NotFound", "no such path")
		return
	}
	name = strings.TrimPrefix(name, "/")
	req := Request{Method: r.Method, Path: r.URL.Path, Name: name}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			s.fail("%s %s: Content-Type %q", r.Method, r.URL.Path, ct)
		}
		raw, _ := io.ReadAll(r.Body)
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		var body kubesecret.Secret
		if err := dec.Decode(&body); err != nil {
			s.fail("%s %s: body %v", r.Method, r.URL.Path, err)
			writeStatus(w, http.StatusBadRequest, "BadRequest", "body")
			return
		}
		if body.APIVersion != "v1" || body.Kind != "Secret" || body.Metadata.Namespace != s.Namespace || body.Metadata.Name == "" {
			s.fail("%s %s: body is %s/%s %s/%s", r.Method, r.URL.Path, body.APIVersion, body.Kind, body.Metadata.Namespace, body.Metadata.Name)
		}
		req.Body = &body
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	switch {
	case r.Method == http.MethodGet && name != "":
		if !s.allowed("get", name) {
			writeStatus(w, http.StatusForbidden, "Forbidden", "get "+name)
			return
		}
		sec, ok := s.Secret(name)
		if !ok {
			writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("secrets %q not found", name))
			return
		}
		writeJSON(w, http.StatusOK, sec)
	case r.Method == http.MethodPost && name == "":
		if !s.allowed("create", "") {
			writeStatus(w, http.StatusForbidden, "Forbidden", "create")
			return
		}
		if req.Body.Metadata.ResourceVersion != "" {
			s.fail("POST with resourceVersion %q", req.Body.Metadata.ResourceVersion)
		}
		if s.BeforeWrite != nil {
			s.BeforeWrite(req)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.secrets[req.Body.Metadata.Name]; ok {
			writeStatus(w, http.StatusConflict, "AlreadyExists", fmt.Sprintf("secrets %q already exists", req.Body.Metadata.Name))
			return
		}
		writeJSON(w, http.StatusCreated, s.putLocked(*req.Body))
	case r.Method == http.MethodPut && name != "":
		if !s.allowed("update", name) {
			writeStatus(w, http.StatusForbidden, "Forbidden", "update "+name)
			return
		}
		if req.Body.Metadata.Name != name {
			s.fail("PUT %s with body name %q", name, req.Body.Metadata.Name)
		}
		if s.BeforeWrite != nil {
			s.BeforeWrite(req)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, ok := s.secrets[name]
		switch {
		case !ok:
			writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("secrets %q not found", name))
		case req.Body.Metadata.ResourceVersion != cur.Metadata.ResourceVersion:
			writeStatus(w, http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
		case req.Body.Type != cur.Type:
			writeStatus(w, http.StatusUnprocessableEntity, "Invalid", "type: field is immutable")
		default:
			writeJSON(w, http.StatusOK, s.putLocked(*req.Body))
		}
	default:
		s.fail("%s %s", r.Method, r.URL.Path)
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
	}
}

func (s *Server) allowed(verb, name string) bool {
	return s.Allowed == nil || s.Allowed(verb, name)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers as the API server does: a metav1.Status body.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"reason": reason, "message": msg, "code": code,
	})
}
