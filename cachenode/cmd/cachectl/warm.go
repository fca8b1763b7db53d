package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/client"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/cachenode/warm"
)

// sampleLine is one line of a samples file (NDJSON).
type sampleLine struct {
	NS  string `json:"ns"`
	Key string `json:"key"`
	At  int64  `json:"at"`
}

// nodeAddrs lists every node of the stored map.
func nodeAddrs(ctx context.Context, c *topology.Client) ([]string, error) {
	t, err := c.Load(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range t.Spec.Nodes {
		out = append(out, fmt.Sprintf("%s:%d", n.Host, n.Port))
	}
	return out, nil
}

// samplesCmd appends every node's recent key samples to a file (or
// stdout), one JSON object per line: what warm replays after a cold start.
func samplesCmd(ctx context.Context, c *topology.Client, nc nodeConn, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("samples", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 100000, "samples to read from each node (its newest)")
	out := fs.String("out", "", "append to this file (default stdout)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *count <= 0 {
		return fmt.Errorf("%w: samples [--count N] [--out FILE]", errUsage)
	}
	addrs, err := nodeAddrs(ctx, c)
	if err != nil {
		return err
	}
	var nodes []*redis.Client
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a, Username: nc.user, Password: nc.pass, TLSConfig: nc.tls, Protocol: 2, MaxRetries: -1})
		defer n.Close()
		nodes = append(nodes, n)
	}
	ss, err := warm.Collect(ctx, nodes, *count)
	if err != nil {
		return err
	}
	w := stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, s := range ss {
		if err := enc.Encode(sampleLine{NS: s.NS, Key: s.Key, At: s.At}); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(stdout, "%d samples from %d nodes appended to %s\n", len(ss), len(nodes), *out)
	}
	return nil
}

func readSamples(path string) ([]samples.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []samples.Sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var l sampleLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, samples.Sample{NS: l.NS, Key: l.Key, At: l.At})
	}
	return out, sc.Err()
}

// warmCmd replays the most sampled keys of a namespace against the origin
// into the cluster (package warm), printing progress every second.
func warmCmd(ctx context.Context, c *topology.Client, nc nodeConn, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("samples", "", "samples file written by cachectl samples")
	origin := fs.String("origin", "", "origin URL with {key}: GET, 200 = value, 404 = skip")
	ns := fs.String("namespace", "default", "namespace whose keys to warm (authenticate with --node-user/--node-password)")
	top := fs.Int("top", 10000, "warm at most this many of the most sampled keys")
	rate := fs.Float64("rate", 200, "origin loads per second")
	conc := fs.Int("concurrency", 4, "origin loads in flight")
	ttl := fs.Duration("ttl", time.Hour, "TTL of warmed keys (0: none; with --format client, the hard TTL)")
	format := fs.String("format", "raw", "raw: the origin's bytes as the value (SET NX); client: cachenode/client's versioned values (its Get, X-Version from the origin)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *file == "" || *origin == "" || *rate <= 0 || (*format != "raw" && *format != "client") {
		return fmt.Errorf("%w: warm --samples FILE --origin URL [--namespace NS] [--top N] [--rate R] [--ttl D] [--format raw|client]", errUsage)
	}
	ss, err := readSamples(*file)
	if err != nil {
		return err
	}
	keys := warm.Top(ss, *ns, *top)
	if len(keys) == 0 {
		return errors.New("no samples of namespace " + *ns + " in " + *file)
	}
	addrs, err := nodeAddrs(ctx, c)
	if err != nil {
		return err
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: nc.user, Password: nc.pass, TLSConfig: nc.tls, Protocol: 2})
	defer cc.Close()
	loader := warm.HTTPLoader{URL: *origin}
	cfg := warm.Config{Keys: keys, Cache: warm.RedisCache{Client: cc, TTL: *ttl},
		Load: loader.Load, Rate: *rate, Concurrency: *conc,
		Report: func(p warm.Progress) { fmt.Fprintln(stdout, p) }}
	if *format == "client" {
		opts := client.Options{Client: cc, NoReplicaRetry: true, Timeout: time.Second, MaxLoaders: *conc}
		if *ttl > 0 {
			opts.HardTTL, opts.SoftTTL = *ttl, *ttl/2
		}
		cl, err := client.New(opts)
		if err != nil {
			return err
		}
		defer cl.Close()
		cfg.Get = func(ctx context.Context, key string) error {
			_, err := cl.Get(ctx, key, func(ctx context.Context) ([]byte, int64, error) {
				v, ver, err := loader.LoadVersion(ctx, key)
				if errors.Is(err, warm.ErrNotFound) {
					err = client.ErrNotFound
				}
				return v, ver, err
			})
			if errors.Is(err, client.ErrNotFound) {
				err = warm.ErrNotFound
			}
			return err
		}
	}
	p, err := warm.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "warmed: %s\n", p)
	return nil
}
