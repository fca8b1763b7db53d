package warm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/samples"
)

// RedisCache is a Cache over go-redis (a ClusterClient for a cluster).
type RedisCache struct {
	Client redis.UniversalClient
	// TTL of filled keys (0: none).
	TTL time.Duration
}

// Cached pipelines one EXISTS per key (keys of a batch may live on
// different nodes).
func (c RedisCache) Cached(ctx context.Context, keys []string) ([]bool, error) {
	pipe := c.Client.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Exists(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// Fill is SET key value NX [PX ttl].
func (c RedisCache) Fill(ctx context.Context, key string, value []byte) error {
	return c.Client.SetNX(ctx, key, value, c.TTL).Err()
}

// HTTPLoader loads a key with GET on URL with "{key}" replaced by the
// path-escaped key: 200 is the value, 404 ErrNotFound, anything else an
// error.
type HTTPLoader struct {
	URL    string
	Client *http.Client
}

// Load is a Config.Load.
func (l HTTPLoader) Load(ctx context.Context, key string) ([]byte, error) {
	v, _, err := l.LoadVersion(ctx, key)
	return v, err
}

// LoadVersion is Load plus the value's version from the X-Version header
// (0 when absent): what cachenode/client's versioned fills need.
func (l HTTPLoader) LoadVersion(ctx context.Context, key string) ([]byte, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.ReplaceAll(l.URL, "{key}", url.PathEscape(key)), nil)
	if err != nil {
		return nil, 0, err
	}
	hc := l.Client
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 512<<20))
	switch {
	case err != nil:
		return nil, 0, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, 0, ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return nil, 0, fmt.Errorf("warm: origin answered %s for %q", resp.Status, key)
	}
	var version int64
	if v := resp.Header.Get("X-Version"); v != "" {
		if version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("warm: origin's X-Version %q for %q: %w", v, key, err)
		}
	}
	return body, version, nil
}

// Collect reads up to count recent samples from each node (CACHE SAMPLES
// over a connection in namespace default: every namespace's samples).
func Collect(ctx context.Context, nodes []*redis.Client, count int) ([]samples.Sample, error) {
	var out []samples.Sample
	for _, n := range nodes {
		v, err := n.Do(ctx, "CACHE", "SAMPLES", count).Slice()
		if err != nil {
			return nil, fmt.Errorf("%s: CACHE SAMPLES: %w", n.Options().Addr, err)
		}
		for _, e := range v {
			f, ok := e.([]any)
			if !ok || len(f) != 3 {
				return nil, fmt.Errorf("%s: CACHE SAMPLES: unexpected entry %v", n.Options().Addr, e)
			}
			ns, _ := f[0].(string)
			key, _ := f[1].(string)
			at, _ := f[2].(int64)
			out = append(out, samples.Sample{NS: ns, Key: key, At: at})
		}
	}
	return out, nil
}
