package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Entry is one key stored under a cluster's prefix other than its
// topology (failure reports, "<cluster>/health/<node>").
type Entry struct {
	// Name is the key without "<cluster>/".
	Name string
	// Revision is the Raft log index of the write that stored it.
	Revision uint64
	Value    []byte
	// Deleted: a watch saw the key deleted (Value empty).
	Deleted bool
}

// entryKey is the kvnode key of name.
func (c *Client) entryKey(name string) string { return c.Cluster + "/" + name }

func (c *Client) checkName(name string) error {
	if name == "" || name == "topology" || strings.HasPrefix(name, "/") {
		return fmt.Errorf("topology: key name %q (not empty, not the topology itself)", name)
	}
	return nil
}

func (c *Client) entryURL(name string) func(addr string) string {
	return func(addr string) string {
		return c.base(addr) + "/v1/cp/" + url.PathEscape(c.keyspace()) + "/" + escapeKey(c.entryKey(name))
	}
}

// Get reads the key name under the cluster (a linearizable read, served by
// the Raft leader). ErrNotFound when absent.
func (c *Client) Get(ctx context.Context, name string) (Entry, error) {
	if err := c.checkName(name); err != nil {
		return Entry{}, err
	}
	r, err := c.do(ctx, http.MethodGet, c.entryURL(name), nil, nil)
	if err != nil {
		return Entry{}, err
	}
	switch r.status {
	case http.StatusOK:
		return Entry{Name: name, Revision: revisionOf(r.header), Value: r.body}, nil
	case http.StatusNotFound:
		if strings.Contains(string(r.body), "keyspace_not_cp") {
			return Entry{}, apiError(r)
		}
		return Entry{}, ErrNotFound
	default:
		return Entry{}, apiError(r)
	}
}

// Put stores value under name unconditionally and returns its revision.
// An unknown outcome (504, a cut connection) is returned as an error, not
// retried: the caller's next write supersedes it.
func (c *Client) Put(ctx context.Context, name string, value []byte) (uint64, error) {
	return c.put(ctx, name, value, nil)
}

// CAS stores value under name if its revision is still expected (0: the
// key must be absent). ErrConflict when it is not; nothing is written then.
// An unknown outcome is returned as an error: read back before deciding.
func (c *Client) CAS(ctx context.Context, name string, value []byte, expected uint64) (uint64, error) {
	return c.put(ctx, name, value, &expected)
}

func (c *Client) put(ctx context.Context, name string, value []byte, expected *uint64) (uint64, error) {
	if err := c.checkName(name); err != nil {
		return 0, err
	}
	hdr := map[string]string{"Content-Type": "application/octet-stream"}
	if expected != nil {
		hdr["If-Match"] = strconv.FormatUint(*expected, 10)
	}
	r, err := c.do(ctx, http.MethodPut, c.entryURL(name), value, hdr)
	if err != nil {
		return 0, err
	}
	switch r.status {
	case http.StatusOK:
		var out struct {
			Revision uint64 `json:"revision"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil {
			return 0, fmt.Errorf("topology: PUT answer: %w", err)
		}
		return out.Revision, nil
	case http.StatusPreconditionFailed:
		return 0, fmt.Errorf("%w: %s: expected revision %d, stored %d", ErrConflict, name, *expected, revisionOf(r.header))
	default:
		return 0, apiError(r)
	}
}

// WatchPrefix calls fn with every change of the keys under
// "<cluster>/<prefix>" from revision from (0 = only new changes) until ctx
// ends, resuming after a broken stream from the last revision seen + 1 on
// the next address, with backoff. When the kvnode history no longer
// reaches that far back (410) it resumes from the first revision kvnode
// still holds: the changes in between are skipped (kvnode cannot list a
// prefix), which suits keys rewritten periodically such as failure
// reports. fn's error ends the watch.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, from uint64, fn func(Entry) error, hooks WatchHooks) error {
	return c.watchLoop(ctx, from, hooks, func(hc *http.Client, addr string, from uint64) (uint64, bool, error) {
		return c.watchPrefixOnce(ctx, hc, addr, prefix, from, fn, hooks)
	})
}

func (c *Client) watchPrefixOnce(ctx context.Context, hc *http.Client, addr, prefix string, from uint64, fn func(Entry) error, hooks WatchHooks) (uint64, bool, error) {
	body, first, err := c.openWatch(ctx, hc, addr, c.entryKey(prefix), from)
	if errors.Is(err, errCompacted) {
		return max(from, first), false, err
	}
	if err != nil {
		return from, false, err
	}
	defer body.Close()
	if hooks.Connected != nil {
		hooks.Connected(addr)
	}
	next, err := readEvents(body, addr, from, func(e *wireEvent) error {
		name, ok := strings.CutPrefix(e.Key, c.Cluster+"/")
		if !ok || !strings.HasPrefix(name, prefix) {
			return nil
		}
		return fn(Entry{Name: name, Revision: e.Revision, Value: e.Value, Deleted: e.Type == "delete"})
	})
	return next, true, err
}
