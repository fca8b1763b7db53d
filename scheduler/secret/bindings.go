package secret

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// Bindings say, per secret, which tenants' jobs may reference it and the
// only URLs its value may be sent to. A secret without a binding can be
// used by nobody: the secrets directory is shared by every tenant of the
// scheduler, so naming a file must not be enough to send it somewhere.
//
// The file (YAML or JSON, unknown fields refused):
//
//	bindings:
//	  - secret: billing-token
//	    tenants: [acme]
//	    destinations:
//	      - https://billing.example.com/hooks/
//
// A destination is scheme://host[:port][/path]: a URL matches when the
// scheme, host and port are equal and its path is the destination's path
// or below it ("/hooks/" and "/hooks" both allow "/hooks/x", not
// "/hooksx"). A URL whose path has dot segments (also percent-encoded) is
// never a match.

var (
	// ErrNotBound: the secret is not bound to the job's tenant (or to
	// anyone). Deliberately the same whether or not the secret exists.
	ErrNotBound = errors.New("secret: not bound to this tenant")
	// ErrDestination: the secret is bound to the tenant but may not be
	// sent to this URL.
	ErrDestination = errors.New("secret: destination not allowed")
	// ErrBindings: the bindings file is missing or invalid; no secret can
	// be used until it is fixed (fail closed).
	ErrBindings = errors.New("secret: bindings unavailable")
)

// Binding is one secret's entry in the bindings file.
type Binding struct {
	Secret       string   `json:"secret"`
	Tenants      []string `json:"tenants"`
	Destinations []string `json:"destinations"`
}

type bindingsFile struct {
	Bindings []Binding `json:"bindings"`
}

// destination is a parsed Binding destination.
type destination struct{ scheme, host, port, path string }

func (d destination) String() string {
	return d.scheme + "://" + d.host + ":" + d.port + d.path
}

// binding is a validated Binding.
type binding struct {
	tenants      []string
	destinations []destination
}

// CheckBindings parses and validates a bindings file as the scheduler
// would, and returns the secrets it binds, sorted (chart tests, tooling).
func CheckBindings(data []byte) ([]string, error) {
	bs, err := parseBindings(data)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(bs))
	for n := range bs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// parseBindings parses and validates a bindings file.
func parseBindings(data []byte) (map[string]binding, error) {
	var f bindingsFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBindings, err)
	}
	out := make(map[string]binding, len(f.Bindings))
	for i, b := range f.Bindings {
		at := fmt.Sprintf("bindings[%d]", i)
		switch {
		case !ValidName(b.Secret):
			return nil, fmt.Errorf("%w: %s.secret %q is not a secret name", ErrBindings, at, b.Secret)
		case len(b.Tenants) == 0:
			return nil, fmt.Errorf("%w: %s (%s): tenants is required", ErrBindings, at, b.Secret)
		case len(b.Destinations) == 0:
			return nil, fmt.Errorf("%w: %s (%s): destinations is required", ErrBindings, at, b.Secret)
		}
		if _, dup := out[b.Secret]; dup {
			return nil, fmt.Errorf("%w: %s: secret %q is bound twice", ErrBindings, at, b.Secret)
		}
		nb := binding{}
		for _, t := range b.Tenants {
			if t == "" || len(t) > 128 {
				return nil, fmt.Errorf("%w: %s (%s): a tenant is 1-128 bytes", ErrBindings, at, b.Secret)
			}
			nb.tenants = append(nb.tenants, t)
		}
		for j, raw := range b.Destinations {
			d, err := parseDestination(raw)
			if err != nil { // the raw string is not echoed: it may hold a password
				return nil, fmt.Errorf("%w: %s.destinations[%d] (%s): %v", ErrBindings, at, j, b.Secret, err)
			}
			nb.destinations = append(nb.destinations, d)
		}
		out[b.Secret] = nb
	}
	return out, nil
}

var defaultPort = map[string]string{"http": "80", "https": "443"}

func parseDestination(raw string) (destination, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return destination{}, errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return destination{}, errors.New("the scheme must be http or https")
	case u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return destination{}, errors.New("want scheme://host[:port][/path], without credentials, query or fragment")
	case !asciiHost(u.Hostname()):
		return destination{}, errors.New("the host must be ASCII (write an IDN in its xn-- form)")
	}
	p, ok := canonicalPath(u)
	if !ok {
		return destination{}, errors.New("the path must be canonical: no dot or empty segments, ';', '\\' or encoded '/', '\\', '%', '.'")
	}
	return destination{scheme: u.Scheme, host: strings.ToLower(u.Hostname()), port: portOf(u), path: p}, nil
}

// asciiHost reports whether host is plain ASCII. A non-ASCII host is
// compared here in one form but dialled in its IDNA (xn--) form, which
// may be another name entirely ("İ" lowercases to "i" but is not "i" in
// IDNA), so it can never match a destination.
func asciiHost(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return false
		}
	}
	return true
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return defaultPort[u.Scheme]
}

// ambiguous are what some servers resolve into path structure although
// a URL parser does not: path parameters (Tomcat's "..;"), backslashes,
// and encoded '/', '\', '%' (double decoding) and '.'.
var ambiguous = []string{";", "\\", "%2f", "%5c", "%25", "%2e"}

// canonicalPath is u's path as it is sent (escaped; "/" when empty); ok
// is false when it holds dot or empty segments, or anything in ambiguous:
// a server could resolve such a path outside a destination.
func canonicalPath(u *url.URL) (string, bool) {
	p := u.EscapedPath()
	if p == "" {
		return "/", true
	}
	lower := strings.ToLower(p)
	for _, a := range ambiguous {
		if strings.Contains(lower, a) {
			return "", false
		}
	}
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return p, clean == p
}

// allows reports whether the target URL is within d.
func (d destination) allows(u *url.URL) bool {
	if u.Scheme != d.scheme || !asciiHost(u.Hostname()) || strings.ToLower(u.Hostname()) != d.host || portOf(u) != d.port {
		return false
	}
	p, ok := canonicalPath(u)
	if !ok {
		return false
	}
	base := strings.TrimSuffix(d.path, "/")
	return base == "" || p == base || strings.HasPrefix(p, base+"/")
}

// bindingsSource reads the bindings file, parsing it again only when it
// changed (a ConfigMap update swaps the file behind a symlink: a new
// inode, size or modification time). What is wrong with the file is
// logged (once per change), never returned: the error reaches run
// records any tenant can read, and the file names every tenant's secrets.
type bindingsSource struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	stamp  stamp
	parsed map[string]binding
	err    error  // the detailed error of the current file, logged
	logged string // the last error logged, so a bad file is logged once
}

type stamp struct {
	mod  time.Time
	size int64
	fi   os.FileInfo
}

// errUnusable is what callers see of a missing or invalid file.
var errUnusable = fmt.Errorf("%w: the secret bindings file is missing or invalid (the scheduler's log says why)", ErrBindings)

func (s *bindingsSource) load() (map[string]binding, error) {
	if s == nil || s.path == "" {
		return nil, fmt.Errorf("%w: no bindings file is configured (--secret-bindings): every secret must be bound to tenants and destinations", ErrBindings)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parsed, err := s.loadLocked()
	if err != nil {
		if msg := err.Error(); msg != s.logged {
			s.logged = msg
			s.log.Error("secret: bindings unusable; no secret can be used until they are fixed", "file", s.path, "err", err)
		}
		return nil, errUnusable
	}
	s.logged = ""
	return parsed, nil
}

// loadLocked reads the file through one handle, so the stamp and the
// content are of the same file, and parses it when it changed.
func (s *bindingsSource) loadLocked() (map[string]binding, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if s.stamp.fi != nil && os.SameFile(s.stamp.fi, fi) && s.stamp.mod.Equal(fi.ModTime()) && s.stamp.size == fi.Size() {
		return s.parsed, s.err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBindingsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxBindingsBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBindings, maxBindingsBytes)
	}
	if int64(len(data)) != fi.Size() { // written while read: read again next time
		return nil, fmt.Errorf("%w: the file changed while it was read", ErrBindings)
	}
	s.parsed, s.err = parseBindings(data)
	s.stamp = stamp{mod: fi.ModTime(), size: fi.Size(), fi: fi}
	return s.parsed, s.err
}

// maxBindingsBytes bounds the bindings file.
const maxBindingsBytes = 4 << 20

// authorize checks that tenant may send secret name to rawURL.
func (s *bindingsSource) authorize(tenant, name, rawURL string) error {
	bs, err := s.load()
	if err != nil {
		return err
	}
	b, ok := bs[name]
	if !ok || !slices.Contains(b.tenants, tenant) {
		return fmt.Errorf("%w: secret %q is not bound to tenant %q", ErrNotBound, name, tenant)
	}
	u, err := url.Parse(rawURL)
	if err == nil {
		for _, d := range b.destinations {
			if d.allows(u) {
				return nil
			}
		}
	}
	allowed := make([]string, len(b.destinations))
	for i, d := range b.destinations {
		allowed[i] = d.String()
	}
	return fmt.Errorf("%w: secret %q may only be sent to %s", ErrDestination, name, strings.Join(allowed, ", "))
}
