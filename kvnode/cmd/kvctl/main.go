// Command kvctl runs kvnode's day-2 operations against a running cluster,
// through the nodes' admin API (cluster.admin: an operator certificate or
// an admin token):
//
//	kvctl --addrs 127.0.0.1:18400,127.0.0.1:18401,127.0.0.1:18402 backup save --out DIR
//	kvctl --addrs <new cluster> backup restore --from DIR
//	kvctl --addrs <nodes to clean> node cleanup
//	kvctl --addrs <the new node> node replace --dead ID
//
// backup save takes a pebble checkpoint of every node listed (each must be
// one of the ring's members, and every member must be listed: a QUORUM
// write acknowledged before the save is then in at least W of them), then
// the consensus tier's snapshot from its leader (after a linearizable
// barrier). DIR gets one <node>.tar per node, cp.snap and backup.json.
//
// backup restore reads each node's checkpoint locally and loads its
// entries, with their original timestamps, into the cluster at --addrs
// (any shape: the cluster's own ring places them; replicas merge, so the
// copies of one key from several backups end as one version, and a
// restore run twice is harmless), then restores the consensus tier's
// snapshot (keys, revisions, leases, API tokens) through its leader.
//
// node cleanup deletes, on each node of --addrs, the data of ranges it no
// longer replicates (after a join or a replacement); node replace makes
// the node at --addrs (new, started with --join-mode manual and the
// cluster as seeds) take over the dead node's tokens and stream its ranges;
// with --raft-addr it then also takes the dead node's place in the
// consensus tier (member remove, then add as a voter, through the node at
// --cp-via).
//
// Credentials: --admin-token-file (PORTICO_ADMIN_TOKEN_FILE; make run
// writes .run/admin-token) sends a bearer token; the workload TLS flags
// (an operator certificate, .run/pki/operator.crt) call the nodes over
// https and check they are kvnodes; --insecure-plaintext calls plain http.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: kvctl [flags] backup save --out DIR
       kvctl [flags] backup restore --from DIR [--tombstone-grace D]
       kvctl [flags] node cleanup
       kvctl [flags] node replace --dead ID [--raft-addr HOST:PORT --cp-via HOST:PORT]
flags:
`

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	addrs := envflag.String(fs, "addrs", "PORTICO_KV_ADDRS", "127.0.0.1:18400,127.0.0.1:18401,127.0.0.1:18402", "comma-separated kvnode HTTP addresses")
	tokenFile := envflag.String(fs, "admin-token-file", "PORTICO_ADMIN_TOKEN_FILE", "", "file holding an admin API token, sent as a bearer token")
	timeout := fs.Duration("timeout", 10*time.Minute, "overall deadline")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "call kvnode over plain http (nodes started with --insecure-plaintext); a token then crosses the network in clear")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) < 2 {
		fs.Usage()
		return 2
	}
	files, err := tlsfiles.LoadOrPlaintext(tlsFlags.Config(), *plaintext, "")
	if err != nil {
		fmt.Fprintln(stderr, "kvctl:", err)
		return 2
	}
	c := &client{}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	if len(c.addrs) == 0 {
		fmt.Fprintln(stderr, "kvctl: --addrs is empty")
		return 2
	}
	if files != nil {
		c.tls = files.ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "kvctl:", err)
			return 2
		}
		c.token = strings.TrimSpace(string(b))
	}
	c.init()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch rest[0] + " " + rest[1] {
	case "backup save":
		err = backupSave(ctx, c, rest[2:], stdout, stderr)
	case "backup restore":
		err = backupRestore(ctx, c, rest[2:], stdout, stderr)
	case "node cleanup":
		err = nodeCleanup(ctx, c, rest[2:], stdout)
	case "node replace":
		err = nodeReplace(ctx, c, rest[2:], stdout, stderr)
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "kvctl:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func nodeCleanup(ctx context.Context, c *client, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: node cleanup takes no arguments (it cleans every node of --addrs)", errUsage)
	}
	for _, a := range c.addrs {
		var res struct {
			KeysDeleted int `json:"keysDeleted"`
			RangesKept  int `json:"rangesKept"`
		}
		if err := c.postJSON(ctx, a, "/admin/v1/cleanup", nil, &res); err != nil {
			return fmt.Errorf("cleanup on %s: %w", a, err)
		}
		fmt.Fprintf(stdout, "%s: deleted %d keys outside the %d ranges it replicates\n", a, res.KeysDeleted, res.RangesKept)
	}
	return nil
}

func nodeReplace(ctx context.Context, c *client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("node replace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dead := fs.String("dead", "", "id of the dead node whose tokens the node at --addrs takes")
	raftAddr := fs.String("raft-addr", "", "the new node's Raft address: also replace the dead node in the consensus tier (remove it, add the new node as a voter), as etcd's member replace; needs --cp-via")
	via := fs.String("cp-via", "", "HTTP address of a live node of the consensus tier, through which the member change runs (the new node is not in the group yet)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *dead == "" || fs.NArg() > 0 || len(c.addrs) != 1 || (*raftAddr == "") != (*via == "") {
		return fmt.Errorf("%w: node replace --dead ID [--raft-addr HOST:PORT --cp-via HOST:PORT], with --addrs naming only the new node", errUsage)
	}
	var res struct {
		Node           string `json:"node"`
		KeysStreamed   int    `json:"keysStreamed"`
		RangesVerified int    `json:"rangesVerified"`
		KeysRepaired   int    `json:"keysRepaired"`
	}
	if err := c.postJSON(ctx, c.addrs[0], "/admin/v1/replace", map[string]string{"node": *dead}, &res); err != nil {
		return fmt.Errorf("replace %s: %w", *dead, err)
	}
	fmt.Fprintf(stdout, "%s replaced %s in the ring: %d keys streamed, %d range replicas verified by Merkle tree (%d keys repaired)\n",
		res.Node, *dead, res.KeysStreamed, res.RangesVerified, res.KeysRepaired)
	if *raftAddr == "" {
		return nil
	}
	return replaceVoter(ctx, c, *via, *dead, res.Node, *raftAddr, stdout)
}

// replaceVoter removes dead from the consensus tier and adds node as a
// voter, in that order: with one voter of three dead, removing it first
// keeps every step's quorum among live voters (adding first would need
// the new voter caught up to reach a quorum of four). Each step is
// skipped when already done, so a rerun finishes an interrupted replace.
func replaceVoter(ctx context.Context, c *client, via, dead, node, raftAddr string, stdout io.Writer) error {
	var ms struct {
		Items []struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raftAddr"`
		} `json:"items"`
	}
	if err := retry(ctx, 10, func() error { return c.get(ctx, via, "/admin/v1/cp/members", &ms) }); err != nil {
		return fmt.Errorf("consensus tier members: %w", err)
	}
	has := func(id string) bool {
		for _, m := range ms.Items {
			if m.ID == id {
				return true
			}
		}
		return false
	}
	if has(dead) {
		err := retry(ctx, 10, func() error {
			return c.send(ctx, http.MethodDelete, via, "/admin/v1/cp/members/"+url.PathEscape(dead), nil)
		})
		if err != nil {
			return fmt.Errorf("removing %s from the consensus tier: %w", dead, err)
		}
		fmt.Fprintf(stdout, "consensus tier: %s removed\n", dead)
	}
	if !has(node) {
		body, _ := json.Marshal(map[string]string{"id": node, "raftAddr": raftAddr})
		err := retry(ctx, 10, func() error {
			return c.send(ctx, http.MethodPost, via, "/admin/v1/cp/members", body)
		})
		if err != nil {
			return fmt.Errorf("adding %s to the consensus tier: %w", node, err)
		}
		fmt.Fprintf(stdout, "consensus tier: %s added as a voter (%s)\n", node, raftAddr)
	}
	return nil
}
