// Package topology keeps a cache cluster's slot map in kvnode's consensus
// tier (the Raft-backed /v1/cp/ API): one JSON document, the cluster
// config file's shape (cluster.Spec, without myself), under the key
// "<cluster>/topology" of a CP keyspace (default "cache").
//
// Writers publish with compare-and-set on the key's revision (If-Match), so
// of two writers starting from the same revision one wins and the other
// gets ErrConflict, and a published map must raise the epoch. Nodes load
// the map at start and follow the key with a watch (Syncer); kvnode is
// never on a cache request's path.
package topology

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
)

// DefaultKeyspace is the CP keyspace holding topologies.
const DefaultKeyspace = "cache"

var (
	// ErrNotFound: no topology has been published for the cluster.
	ErrNotFound = errors.New("topology: no topology published")
	// ErrConflict: the stored revision is not the expected one; nothing was
	// written.
	ErrConflict = errors.New("topology: revision conflict")
	// ErrEpoch: the map's epoch does not raise the stored one's.
	ErrEpoch = errors.New("topology: epoch not above the stored one")
	// ErrUnavailable: no kvnode answered (every address refused, timed out
	// or had no Raft leader).
	ErrUnavailable = errors.New("topology: store unavailable")
)

// Topology is a stored map and its revision (the Raft log index of the
// write that stored it: the If-Match of the next Publish).
type Topology struct {
	Revision uint64
	Spec     cluster.Spec
	// Raw is the stored document.
	Raw []byte
}

// Client reads and writes one cluster's topology on a kvnode group.
type Client struct {
	// Addrs are kvnode HTTP addresses (host:port, or with an explicit
	// http:// or https:// scheme), tried in turn: the next on a connection
	// failure or a 503, the leader first when a 503 names it.
	Addrs []string
	// Cluster names the cluster: the key is Cluster + "/topology".
	Cluster string
	// Keyspace is the CP keyspace (default DefaultKeyspace); kvnode must
	// declare it with --cp-keyspaces.
	Keyspace string
	// HTTP is the client for reads and writes (default: one with a 10 s
	// timeout); watches use its Transport without the timeout.
	HTTP *http.Client
	// TLS, when set, makes addresses without a scheme https:// and, when
	// HTTP is nil, is the default client's TLS configuration. A workload
	// passes tlsfiles.Files.ClientConfig with a policy admitting kvnode:
	// it presents the workload's certificate and checks kvnode's SPIFFE ID.
	TLS *tls.Config

	next    atomic.Uint32 // the address to start from
	tlsOnce sync.Once
	tlsHTTP *http.Client // built from TLS
}

// Key is the document's key inside the keyspace.
func (c *Client) Key() string { return c.Cluster + "/topology" }

func (c *Client) keyspace() string {
	if c.Keyspace == "" {
		return DefaultKeyspace
	}
	return c.Keyspace
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	if c.TLS == nil {
		return defaultHTTP
	}
	c.tlsOnce.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = c.TLS
		c.tlsHTTP = &http.Client{Transport: t, Timeout: defaultHTTP.Timeout}
	})
	return c.tlsHTTP
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

func hasScheme(addr string) bool {
	return strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")
}

// base is addr's URL without a path: its own scheme, else https with TLS
// and http without.
func (c *Client) base(addr string) string {
	switch {
	case hasScheme(addr):
		return strings.TrimSuffix(addr, "/")
	case c.TLS != nil:
		return "https://" + addr
	}
	return "http://" + addr
}

// configured maps a leader's host:port (kvnode's 503 names it without a
// scheme) to the configured address of that host:port, so the leader is
// called with the scheme the caller chose.
func (c *Client) configured(hostport string) string {
	for _, a := range c.Addrs {
		_, rest, withScheme := strings.Cut(a, "://")
		if a == hostport || withScheme && strings.TrimSuffix(rest, "/") == hostport {
			return a
		}
	}
	return hostport
}

func (c *Client) keyURL(addr string) string {
	return c.base(addr) + "/v1/cp/" + url.PathEscape(c.keyspace()) + "/" + escapeKey(c.Key())
}

// escapeKey escapes each path segment of key (it may contain '/').
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Validate checks the client's settings.
func (c *Client) Validate() error {
	if len(c.Addrs) == 0 {
		return errors.New("topology: no kvnode addresses")
	}
	if c.Cluster == "" || strings.ContainsAny(c.Cluster, " \t\r\n") {
		return fmt.Errorf("topology: cluster name %q must be non-empty without spaces", c.Cluster)
	}
	return nil
}

// response is one kvnode answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends the request to each address in turn (starting with the last one
// that answered) until one answers with something other than 503; a 503
// naming the leader's HTTP address moves it to the front. ctx bounds the
// whole. Errors: ErrUnavailable (wrapping the last failure).
func (c *Client) do(ctx context.Context, method string, path func(addr string) string, body []byte, hdr map[string]string) (*response, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	n := len(c.Addrs)
	start := int(c.next.Load()) % n
	order := make([]string, 0, n+1)
	for i := range n {
		order = append(order, c.Addrs[(start+i)%n])
	}
	var last error
	tried := map[string]bool{}
	for i := 0; i < len(order); i++ {
		addr := order[i]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		req, err := http.NewRequestWithContext(ctx, method, path(addr), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.httpClient().Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = fmt.Errorf("%s: %w", addr, err)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil {
			last = fmt.Errorf("%s: %w", addr, err)
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			last = fmt.Errorf("%s: 503 %s", addr, strings.TrimSpace(string(b)))
			if l := c.configured(resp.Header.Get("X-KV-Leader-Http-Addr")); l != "" && !tried[l] {
				// Try the leader next.
				order = append(order[:i+1], append([]string{l}, order[i+1:]...)...)
			}
			continue
		}
		for j, a := range c.Addrs {
			if a == addr {
				c.next.Store(uint32(j))
			}
		}
		return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
	}
	return nil, fmt.Errorf("%w: %v", ErrUnavailable, last)
}

func revisionOf(h http.Header) uint64 {
	v := h.Get("X-KV-Revision")
	if v == "" {
		v = strings.Trim(h.Get("ETag"), `"`)
	}
	r, _ := strconv.ParseUint(v, 10, 64)
	return r
}

func apiError(r *response) error {
	return fmt.Errorf("topology: kvnode answered %d: %s", r.status, strings.TrimSpace(string(r.body)))
}

// Decode parses a stored document (JSON, the config file's fields).
func Decode(raw []byte) (cluster.Spec, error) {
	var s cluster.Spec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return cluster.Spec{}, fmt.Errorf("topology: stored document: %w", err)
	}
	return s, nil
}

// Encode is the stored form of s: JSON, without Myself (each node is
// itself by its own id).
func Encode(s cluster.Spec) ([]byte, error) {
	s.Myself = ""
	return json.MarshalIndent(s, "", "  ")
}

// Load reads the stored topology (a linearizable read, served by the Raft
// leader). ErrNotFound when none was published.
func (c *Client) Load(ctx context.Context) (*Topology, error) {
	r, err := c.do(ctx, http.MethodGet, c.keyURL, nil, nil)
	if err != nil {
		return nil, err
	}
	switch r.status {
	case http.StatusOK:
	case http.StatusNotFound:
		if bytes.Contains(r.body, []byte("keyspace_not_cp")) {
			return nil, apiError(r)
		}
		return nil, ErrNotFound
	default:
		return nil, apiError(r)
	}
	spec, err := Decode(r.body)
	if err != nil {
		return nil, err
	}
	return &Topology{Revision: revisionOf(r.header), Spec: spec, Raw: r.body}, nil
}

// Publish stores s if the stored topology is still at expected (0: none
// stored yet) and s raises its epoch; it returns the new revision. s is
// validated as a map first (cluster.Spec.Validate). The epoch is checked
// against the stored map before the compare-and-set, and the
// compare-and-set makes that check hold at the write: two writers starting
// from one revision cannot both install a map. ErrConflict when the
// revision moved, ErrEpoch when the epoch does not rise; nothing is written
// then. An unknown outcome (a 504, a connection cut) is retried with the
// same If-Match, which cannot apply twice; a conflict after such a retry
// whose stored document is s's is the first attempt's success.
func (c *Client) Publish(ctx context.Context, s cluster.Spec, expected uint64) (uint64, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	raw, err := Encode(s)
	if err != nil {
		return 0, err
	}
	cur, err := c.Load(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		if expected != 0 {
			return 0, fmt.Errorf("%w: expected revision %d, none stored", ErrConflict, expected)
		}
	case err != nil:
		return 0, err
	case cur.Revision != expected:
		return 0, fmt.Errorf("%w: expected revision %d, stored %d (epoch %d)", ErrConflict, expected, cur.Revision, cur.Spec.Epoch)
	case s.Epoch <= cur.Spec.Epoch:
		return 0, fmt.Errorf("%w: epoch %d, stored %d", ErrEpoch, s.Epoch, cur.Spec.Epoch)
	}
	hdr := map[string]string{"If-Match": strconv.FormatUint(expected, 10), "Content-Type": "application/json"}
	uncertain := false
	for attempt := 0; ; attempt++ {
		r, err := c.do(ctx, http.MethodPut, c.keyURL, raw, hdr)
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, err
		case err != nil:
			// A request cut after it was sent may have been applied.
			uncertain = true
		case r.status == http.StatusOK:
			var out struct {
				Revision uint64 `json:"revision"`
			}
			if err := json.Unmarshal(r.body, &out); err != nil {
				return 0, fmt.Errorf("topology: PUT answer: %w", err)
			}
			return out.Revision, nil
		case r.status == http.StatusPreconditionFailed:
			if uncertain {
				if now, lerr := c.Load(ctx); lerr == nil && bytes.Equal(now.Raw, raw) {
					return now.Revision, nil
				}
			}
			return 0, fmt.Errorf("%w: expected revision %d, stored %d", ErrConflict, expected, revisionOf(r.header))
		case r.status == http.StatusGatewayTimeout:
			uncertain = true
			err = apiError(r)
		default:
			return 0, apiError(r)
		}
		if attempt >= 5 {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff(attempt)):
		}
	}
}

// backoff is 100 ms doubling to 2 s, with jitter.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 5)
	d = min(d, 2*time.Second)
	return d/2 + time.Duration(time.Now().UnixNano()%int64(d/2))
}

// Update is one change of the topology key seen by Watch.
type Update struct {
	Revision uint64
	// Deleted: the key was deleted (Raw, Spec empty).
	Deleted bool
	Raw     []byte
	// Spec is the decoded document; Err is set when it does not decode.
	Spec cluster.Spec
	Err  error
}

type wireEvent struct {
	Revision uint64          `json:"revision"`
	Type     string          `json:"type"`
	Key      string          `json:"key"`
	Value    []byte          `json:"value"`
	Error    json.RawMessage `json:"error"`
}

// WatchHooks are optional callbacks of Watch.
type WatchHooks struct {
	// Connected is called when a stream is established on addr.
	Connected func(addr string)
	// Disconnected is called when a stream or a connection attempt fails.
	Disconnected func(addr string, err error)
}

// Watch calls fn with every change of the topology key from revision from
// (0 = only new changes) until ctx ends, resuming after a broken stream
// from the last revision seen + 1 on the next address, with backoff. When
// the kvnode history no longer reaches that far back (410), it reads the
// key and resumes from there, so fn sees the current document (a change in
// between may be skipped; none is seen twice). fn's error ends the watch.
func (c *Client) Watch(ctx context.Context, from uint64, fn func(Update) error, hooks WatchHooks) error {
	return c.watchLoop(ctx, from, hooks, func(hc *http.Client, addr string, from uint64) (uint64, bool, error) {
		return c.watchOnce(ctx, hc, addr, from, fn, hooks)
	})
}

// watchLoop runs once against each address in turn from the one that last
// answered, resuming from the revision it reached, with backoff after a
// round of failures or a broken established stream, until ctx ends or the
// callback fails (a callbackError).
func (c *Client) watchLoop(ctx context.Context, from uint64, hooks WatchHooks,
	once func(hc *http.Client, addr string, from uint64) (next uint64, established bool, err error)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	hc := &http.Client{Transport: c.httpClient().Transport}
	start := int(c.next.Load())
	failures := 0
	for i := start; ; i++ {
		addr := c.Addrs[i%len(c.Addrs)]
		next, established, err := once(hc, addr, from)
		if ctx.Err() != nil {
			return nil
		}
		var fnErr *callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		from = next
		if hooks.Disconnected != nil {
			hooks.Disconnected(addr, err)
		}
		if established {
			failures = 0
		} else {
			failures++
		}
		if failures >= len(c.Addrs) || established {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff(failures / len(c.Addrs))):
			}
		}
	}
}

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

var errCompacted = errors.New("topology: watch history compacted")

// watchOnce runs one stream; it returns the revision to resume from and
// whether the stream was established.
func (c *Client) watchOnce(ctx context.Context, hc *http.Client, addr string, from uint64, fn func(Update) error, hooks WatchHooks) (uint64, bool, error) {
	body, first, err := c.openWatch(ctx, hc, addr, c.Key(), from)
	if errors.Is(err, errCompacted) {
		next, err := c.resync(ctx, from, first, fn)
		if err == nil {
			err = errCompacted
		}
		return next, false, err
	}
	if err != nil {
		return from, false, err
	}
	defer body.Close()
	if hooks.Connected != nil {
		hooks.Connected(addr)
	}
	next, err := readEvents(body, addr, from, func(e *wireEvent) error {
		if e.Key != c.Key() {
			return nil // another key with the same prefix
		}
		u := Update{Revision: e.Revision}
		if e.Type == "delete" {
			u.Deleted = true
		} else {
			u.Raw = e.Value
			u.Spec, u.Err = Decode(e.Value)
		}
		return fn(u)
	})
	return next, true, err
}

// openWatch starts a watch of the keys under prefix (a full key) from
// revision from (0: new changes only) on addr. When kvnode's history no
// longer reaches from (410) it returns errCompacted and the first revision
// kvnode still holds.
func (c *Client) openWatch(ctx context.Context, hc *http.Client, addr, prefix string, from uint64) (io.ReadCloser, uint64, error) {
	q := url.Values{"watch": {"true"}, "prefix": {prefix}}
	if from > 0 {
		q.Set("fromRevision", strconv.FormatUint(from, 10))
	}
	u := c.base(addr) + "/v1/cp/" + url.PathEscape(c.keyspace()) + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, 0, nil
	case http.StatusGone:
		var body struct {
			FirstRevision uint64 `json:"firstRevision"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
		resp.Body.Close()
		return nil, body.FirstRevision, errCompacted
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return nil, 0, fmt.Errorf("%s: watch answered %d: %s", addr, resp.StatusCode, strings.TrimSpace(string(b)))
	}
}

// readEvents decodes a watch stream, calling fn for each event at or past
// revision from (so none is seen twice across reconnects). It returns the
// revision to resume from and what ended the stream: a callbackError when
// fn failed.
func readEvents(r io.Reader, addr string, from uint64, fn func(*wireEvent) error) (uint64, error) {
	dec := json.NewDecoder(r)
	for {
		var e wireEvent
		if err := dec.Decode(&e); err != nil {
			return from, fmt.Errorf("%s: watch stream: %w", addr, err)
		}
		if len(e.Error) > 0 {
			return from, fmt.Errorf("%s: watch ended: %s", addr, e.Error)
		}
		if e.Revision < from {
			continue
		}
		from = e.Revision + 1
		if err := fn(&e); err != nil {
			return from, &callbackError{err}
		}
	}
}

// resync reads the key after a 410 and reports it as an update when it is
// newer than what was seen; it returns where to watch from.
func (c *Client) resync(ctx context.Context, from, first uint64, fn func(Update) error) (uint64, error) {
	t, err := c.Load(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		return max(from, first), nil
	case err != nil:
		return from, err
	}
	if t.Revision >= from {
		if err := fn(Update{Revision: t.Revision, Raw: t.Raw, Spec: t.Spec}); err != nil {
			return from, &callbackError{err}
		}
		from = t.Revision + 1
	}
	return max(from, first), nil
}
