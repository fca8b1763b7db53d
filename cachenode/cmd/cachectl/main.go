// Command cachectl administers a Portico cache cluster whose slot map lives
// in kvnode's consensus tier (cachenode --cluster-kv-addrs):
//
//	cachectl --kv-addrs 127.0.0.1:18400,127.0.0.1:18401 --cluster prod topology get
//	cachectl --kv-addrs … --cluster prod topology set --file map.yaml [--revision N]
//
// get prints the stored map as YAML, with its revision in a comment. set
// validates the file as a slot map, takes the stored epoch + 1 when the
// file has none (or checks that the file's raises it), and publishes with
// compare-and-set: on the revision given with --revision (what an earlier
// get printed: nothing changed since), or else on the one it just read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/envflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: cachectl [flags] topology get
       cachectl [flags] topology set --file map.yaml [--revision N]
flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cachectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	addrs := envflag.String(fs, "kv-addrs", "PORTICO_CACHE_CLUSTER_KV_ADDRS", "127.0.0.1:18400,127.0.0.1:18401,127.0.0.1:18402", "comma-separated kvnode HTTP addresses")
	name := envflag.String(fs, "cluster", "PORTICO_CACHE_CLUSTER_NAME", "", "cluster name (the key <name>/topology)")
	keyspace := envflag.String(fs, "keyspace", "PORTICO_CACHE_CLUSTER_KV_KEYSPACE", topology.DefaultKeyspace, "kvnode CP keyspace")
	timeout := fs.Duration("timeout", 30*time.Second, "overall deadline")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) < 2 || rest[0] != "topology" || (rest[1] != "get" && rest[1] != "set") {
		fs.Usage()
		return 2
	}
	c := &topology.Client{Cluster: *name, Keyspace: *keyspace}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, "cachectl:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	if rest[1] == "get" {
		err = get(ctx, c, rest[2:], stdout)
	} else {
		err = set(ctx, c, rest[2:], stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "cachectl:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

func get(ctx context.Context, c *topology.Client, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: topology get takes no arguments", errUsage)
	}
	t, err := c.Load(ctx)
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(t.Spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# cluster %s, revision %d (topology set --revision %d publishes only if it is still current)\n%s",
		c.Cluster, t.Revision, t.Revision, out)
	return nil
}

func set(ctx context.Context, c *topology.Client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology set", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", "", "slot map (YAML or JSON, the cluster config file's fields; epoch optional)")
	rev := fs.Int64("revision", -1, "publish only if the stored revision is this one (0: only if none is stored); default: the revision read now")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *file == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: topology set --file map.yaml [--revision N]", errUsage)
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	spec, err := cluster.ParseSpec(data)
	if err != nil {
		return err
	}
	if spec.Myself != "" {
		return errors.New("the stored map is every node's: remove myself from the file")
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	cur, err := c.Load(ctx)
	var stored, storedEpoch uint64
	switch {
	case errors.Is(err, topology.ErrNotFound):
	case err != nil:
		return err
	default:
		stored, storedEpoch = cur.Revision, cur.Spec.Epoch
	}
	expected := stored
	if *rev >= 0 {
		expected = uint64(*rev)
	}
	if spec.Epoch == 0 {
		spec.Epoch = storedEpoch + 1
	}
	newRev, err := c.Publish(ctx, spec, expected)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published cluster %s epoch %d at revision %d (was epoch %d, revision %d)\n", c.Cluster, spec.Epoch, newRev, storedEpoch, stored)
	return nil
}
