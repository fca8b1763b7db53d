// Command cachectl administers a Portico cache cluster whose slot map lives
// in kvnode's consensus tier (cachenode --cluster-kv-addrs):
//
//	cachectl --kv-addrs 127.0.0.1:18400,127.0.0.1:18401 --cluster prod topology get
//	cachectl --kv-addrs … --cluster prod topology set --file map.yaml [--revision N]
//	cachectl … topology init --node a=10.0.0.1:7000 --node b=10.0.0.2:7000 … [--replicas 1]
//	cachectl … node add --id d --host 10.0.0.4 --port 7000 [--bus-port P] [--replica-of a]
//	cachectl … node remove --id d
//	cachectl … reshard --slots 0-99,200 --to d [--batch 16] [--pause 0]
//	cachectl … rebalance [--exclude d,e]
//	cachectl … samples [--count 100000] [--out samples.ndjson]
//	cachectl … warm --samples samples.ndjson --origin 'http://origin/items/{key}' [--namespace app] [--top 10000] [--rate 200] [--ttl 1h]
//
// node, reshard and rebalance change the stored map step by step (package
// reshard) and wait for the nodes concerned to follow each step; an
// interrupted reshard or rebalance resumes when run again.
//
// With the workload flags --tls-cert-file, --tls-key-file and --tls-ca-file
// (an operator certificate; make run writes .run/pki/operator.crt) cachectl
// calls kvnode over https and the cache nodes' RESP ports over TLS,
// presenting that certificate and checking the servers' identities;
// --insecure-plaintext calls both in plaintext (nodes started with it).
//
// get prints the stored map as YAML, with its revision in a comment. set
// validates the file as a slot map, takes the stored epoch + 1 when the
// file has none (or checks that the file's raises it), and publishes with
// compare-and-set: on the revision given with --revision (what an earlier
// get printed: nothing changed since), or else on the one it just read.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: cachectl [flags] topology get
       cachectl [flags] topology set --file map.yaml [--revision N]
       cachectl [flags] topology init --node ID=HOST:PORT[@BUSPORT] ... [--replicas N]
       cachectl [flags] node add --id ID --host HOST --port PORT [--bus-port P] [--replica-of ID]
       cachectl [flags] node remove --id ID
       cachectl [flags] reshard --slots 0-99,200 --to ID [--batch N] [--pause D]
       cachectl [flags] rebalance [--exclude ID,ID]
       cachectl [flags] samples [--count N] [--out FILE]
       cachectl [flags] warm --samples FILE --origin URL [--namespace NS] [--top N] [--rate R] [--ttl D]
flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cachectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	addrs := envflag.String(fs, "kv-addrs", "PORTICO_CACHE_CLUSTER_KV_ADDRS", "127.0.0.1:18400,127.0.0.1:18401,127.0.0.1:18402", "comma-separated kvnode HTTP addresses")
	name := envflag.String(fs, "cluster", "PORTICO_CACHE_CLUSTER_NAME", "", "cluster name (the key <name>/topology)")
	keyspace := envflag.String(fs, "keyspace", "PORTICO_CACHE_CLUSTER_KV_KEYSPACE", topology.DefaultKeyspace, "kvnode CP keyspace")
	timeout := fs.Duration("timeout", 30*time.Second, "overall deadline (reshard and rebalance: per step)")
	user := envflag.String(fs, "node-user", "PORTICO_CACHE_NODE_USER", "", "AUTH username (namespace) for the nodes, when they require auth")
	pass := envflag.String(fs, "node-password", "PORTICO_CACHE_NODE_PASSWORD", "", "AUTH secret for the nodes")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "call kvnode and the cache nodes without TLS, AUTH secrets in clear (for nodes started with --insecure-plaintext)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	valid := len(rest) >= 2 && (rest[0] == "topology" && (rest[1] == "get" || rest[1] == "set" || rest[1] == "init") ||
		rest[0] == "node" && (rest[1] == "add" || rest[1] == "remove")) ||
		len(rest) >= 1 && (rest[0] == "reshard" || rest[0] == "rebalance" || rest[0] == "samples" || rest[0] == "warm")
	if !valid {
		fs.Usage()
		return 2
	}
	files, err := tlsfiles.LoadOrPlaintext(tlsFlags.Config(), *plaintext, "")
	if err != nil {
		fmt.Fprintln(stderr, "cachectl:", err)
		return 2
	}
	nodes := nodeConn{user: *user, pass: *pass}
	c := &topology.Client{Cluster: *name, Keyspace: *keyspace}
	if files != nil {
		c.TLS = files.ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})
		nodes.tls = files.ClientConfig(identity.Policy{Roles: []identity.Role{identity.CacheNode}})
	}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, "cachectl:", err)
		return 2
	}
	rs := &reshard.Resharder{Client: c, Nodes: reshard.RESP{Username: nodes.user, Password: nodes.pass, TLS: nodes.tls}, StepTimeout: *timeout, Log: stdout}
	switch rest[0] {
	case "reshard":
		err = reshardCmd(ctx, rs, rest[1:], stderr)
	case "rebalance":
		err = rebalanceCmd(ctx, rs, rest[1:], stdout, stderr)
	case "samples":
		err = samplesCmd(ctx, c, nodes, rest[1:], stdout, stderr)
	case "warm":
		err = warmCmd(ctx, c, nodes, rest[1:], stdout, stderr)
	default:
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		switch rest[0] + " " + rest[1] {
		case "topology get":
			err = get(ctx, c, rest[2:], stdout)
		case "topology set":
			err = set(ctx, c, rest[2:], stdout, stderr)
		case "topology init":
			err = initCmd(ctx, c, rest[2:], stdout, stderr)
		case "node add":
			err = nodeAdd(ctx, rs, rest[2:], stdout, stderr)
		case "node remove":
			err = nodeRemove(ctx, rs, rest[2:], stdout, stderr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "cachectl:", err)
		if errors.Is(err, errUsage) || errors.Is(err, reshard.ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

// nodeConn is how cachectl reaches the cache nodes' RESP ports.
type nodeConn struct {
	user, pass string
	tls        *tls.Config // nil: plaintext
}

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

func nodeAdd(ctx context.Context, rs *reshard.Resharder, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("node add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var n cluster.NodeSpec
	fs.StringVar(&n.ID, "id", "", "node id (its --node-id)")
	fs.StringVar(&n.Host, "host", "", "address clients and peers reach it at")
	fs.IntVar(&n.Port, "port", 0, "RESP port")
	fs.IntVar(&n.BusPort, "bus-port", 0, "node-to-node port (default port + 10000)")
	fs.StringVar(&n.ReplicaOf, "replica-of", "", "add as a replica of this primary")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || n.ID == "" || n.Host == "" || n.Port == 0 {
		return fmt.Errorf("%w: node add --id ID --host HOST --port PORT [--bus-port P] [--replica-of ID]", errUsage)
	}
	m, err := rs.AddNode(ctx, n)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "added %s at epoch %d (it owns no slots: reshard or rebalance to give it some)\n", n.ID, m.Epoch)
	return nil
}

func nodeRemove(ctx context.Context, rs *reshard.Resharder, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("node remove", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "", "node id")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *id == "" {
		return fmt.Errorf("%w: node remove --id ID", errUsage)
	}
	m, err := rs.RemoveNode(ctx, *id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %s at epoch %d\n", *id, m.Epoch)
	return nil
}

func reshardCmd(ctx context.Context, rs *reshard.Resharder, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("reshard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("slots", "", "slots to move: 0-99,200")
	to := fs.String("to", "", "primary receiving them")
	fs.IntVar(&rs.Batch, "batch", 16, "slots taken through each step together")
	fs.DurationVar(&rs.Pause, "pause", 0, "wait between batches")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *spec == "" || *to == "" {
		return fmt.Errorf("%w: reshard --slots 0-99,200 --to ID [--batch N] [--pause D]", errUsage)
	}
	list, err := reshard.ParseSlots(*spec)
	if err != nil {
		return err
	}
	return rs.Move(ctx, list, *to)
}

func rebalanceCmd(ctx context.Context, rs *reshard.Resharder, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rebalance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exclude := fs.String("exclude", "", "primaries to drain (comma-separated)")
	fs.IntVar(&rs.Batch, "batch", 16, "slots taken through each step together")
	fs.DurationVar(&rs.Pause, "pause", 0, "wait between batches")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return fmt.Errorf("%w: rebalance [--exclude ID,ID]", errUsage)
	}
	var ex []string
	for _, id := range strings.Split(*exclude, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ex = append(ex, id)
		}
	}
	n, err := rs.Rebalance(ctx, ex...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebalanced: %d slots moved\n", n)
	return nil
}

// nodeList collects repeated --node ID=HOST:PORT[@BUSPORT] flags.
type nodeList []cluster.NodeSpec

func (l *nodeList) String() string { return fmt.Sprint(len(*l), " nodes") }

func (l *nodeList) Set(v string) error {
	id, addr, ok := strings.Cut(v, "=")
	if !ok || id == "" {
		return fmt.Errorf("want ID=HOST:PORT[@BUSPORT], got %q", v)
	}
	addr, bus, hasBus := strings.Cut(addr, "@")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	n := cluster.NodeSpec{ID: id, Host: host}
	if n.Port, err = strconv.Atoi(port); err != nil {
		return fmt.Errorf("port %q: %w", port, err)
	}
	if hasBus {
		if n.BusPort, err = strconv.Atoi(bus); err != nil {
			return fmt.Errorf("bus port %q: %w", bus, err)
		}
	}
	*l = append(*l, n)
	return nil
}

// initCmd publishes a first map (reshard.Initial) unless one is stored:
// safe to run from every installer.
func initCmd(ctx context.Context, c *topology.Client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nodes nodeList
	fs.Var(&nodes, "node", "a member, ID=HOST:PORT[@BUSPORT], repeated in order: primaries first")
	replicas := fs.Int("replicas", 0, "replicas per primary: the last len/(1+N)*N nodes replicate the first ones")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || len(nodes) == 0 {
		return fmt.Errorf("%w: topology init --node ID=HOST:PORT[@BUSPORT] ... [--replicas N]", errUsage)
	}
	published, err := reshard.Init(ctx, c, nodes, *replicas)
	if err != nil {
		return err
	}
	if published {
		fmt.Fprintf(stdout, "published the first map of cluster %s: %d primaries, %d replicas each\n", c.Cluster, len(nodes)/(1+*replicas), *replicas)
	} else {
		fmt.Fprintf(stdout, "cluster %s already has a map; left as it is\n", c.Cluster)
	}
	return nil
}
