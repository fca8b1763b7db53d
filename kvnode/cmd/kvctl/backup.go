package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/portico-io/portico/kvnode"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/ring"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Backup directory layout.
const (
	backupIndexName = "backup.json"
	cpSnapshotName  = "cp.snap"
	// restoreBatch is how many entries one POST /admin/v1/restore carries,
	// so a failed request is retried (idempotently) without resending much.
	restoreBatch = 1000
)

// backupIndex is backup.json: what a backup directory holds.
type backupIndex struct {
	CreatedAt time.Time `json:"createdAt"`
	// Nodes are the ring members backed up, one <id>.tar each.
	Nodes []string `json:"nodes"`
	// CPRevision is the consensus tier revision cp.snap covers (absent:
	// the cluster runs without the tier).
	CPRevision uint64 `json:"cpRevision,omitempty"`
}

func backupSave(ctx context.Context, c *client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup save", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory to write the backup to (created; must not hold a backup)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: backup save --out DIR", errUsage)
	}
	if _, err := os.Stat(filepath.Join(*out, backupIndexName)); err == nil {
		return fmt.Errorf("%s already holds a backup", *out)
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	var rv kvnode.RingView
	if err := c.get(ctx, c.addrs[0], "/v1/ring", &rv); err != nil {
		return fmt.Errorf("ring from %s: %w", c.addrs[0], err)
	}
	idx := backupIndex{CreatedAt: time.Now().UTC()}
	for _, a := range c.addrs {
		m, err := saveNode(ctx, c, a, *out)
		if err != nil {
			return fmt.Errorf("backup of %s: %w", a, err)
		}
		idx.Nodes = append(idx.Nodes, m.Node)
		fmt.Fprintf(stdout, "%s: checkpoint of %s saved\n", a, m.Node)
	}
	var missing []string
	for _, m := range rv.Nodes {
		if !slices.Contains(idx.Nodes, m.ID) {
			missing = append(missing, m.ID)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("ring members %v were not backed up: list every member in --addrs (a QUORUM write is only sure to be in W of its N replicas)", missing)
	}
	rev, err := saveCP(ctx, c, filepath.Join(*out, cpSnapshotName))
	switch {
	case errors.Is(err, errNoCP):
		fmt.Fprintln(stdout, "consensus tier: not running on this cluster, nothing to save")
	case err != nil:
		return fmt.Errorf("consensus tier snapshot: %w", err)
	default:
		idx.CPRevision = rev
		fmt.Fprintf(stdout, "consensus tier: snapshot at revision %d saved\n", rev)
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, backupIndexName), b, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backup of %d nodes in %s\n", len(idx.Nodes), *out)
	return nil
}

// saveNode streams one node's checkpoint to dir/<node>.tar.
func saveNode(ctx context.Context, c *client, addr, dir string) (kvnode.BackupManifest, error) {
	var m kvnode.BackupManifest
	resp, err := c.post(ctx, addr, "/admin/v1/backup", "", nil)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(dir, ".partial-*.tar")
	if err != nil {
		return m, err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return m, err
	}
	if err := f.Close(); err != nil {
		return m, err
	}
	// Read it back whole: a stream cut short lacks the tar's end.
	if m, err = extract(f.Name(), ""); err != nil {
		return m, err
	}
	if m.Node == "" || strings.ContainsAny(m.Node, `/\`) || m.Node[0] == '.' {
		return m, fmt.Errorf("node id %q cannot name a file", m.Node)
	}
	return m, os.Rename(f.Name(), filepath.Join(dir, m.Node+".tar"))
}

var errNoCP = errors.New("no consensus tier")

func saveCP(ctx context.Context, c *client, path string) (uint64, error) {
	var data []byte
	var rev uint64
	err := retry(ctx, 10, func() error {
		resp, err := c.post(ctx, c.addrs[0], "/admin/v1/cp/snapshot", "", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if data, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		rev, err = strconv.ParseUint(resp.Header.Get("X-KV-Revision"), 10, 64)
		return err
	})
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotImplemented {
		return 0, errNoCP
	}
	if err != nil {
		return 0, err
	}
	return rev, os.WriteFile(path, data, 0o600)
}

// extract reads a node archive: its manifest, and with dir set the
// checkpoint's files into dir.
func extract(path, dir string) (kvnode.BackupManifest, error) {
	var m kvnode.BackupManifest
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("%s: %w", path, err)
		}
		switch {
		case h.Name == kvnode.BackupManifestName:
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				return m, fmt.Errorf("%s: manifest: %w", path, err)
			}
			if m.Format != kvnode.BackupFormat {
				return m, fmt.Errorf("%s: format %q, want %q", path, m.Format, kvnode.BackupFormat)
			}
		case strings.HasPrefix(h.Name, kvnode.BackupRingDir):
			name := strings.TrimPrefix(h.Name, kvnode.BackupRingDir)
			if !filepath.IsLocal(name) {
				return m, fmt.Errorf("%s: entry %q escapes the archive", path, h.Name)
			}
			if dir == "" {
				_, err = io.Copy(io.Discard, tr)
			} else {
				err = writeFile(filepath.Join(dir, filepath.FromSlash(name)), tr)
			}
			if err != nil {
				return m, fmt.Errorf("%s: %w", path, err)
			}
		default:
			return m, fmt.Errorf("%s: unexpected entry %q", path, h.Name)
		}
	}
	if m.Format == "" {
		return m, fmt.Errorf("%s: no manifest", path)
	}
	return m, nil
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func backupRestore(ctx context.Context, c *client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "backup directory written by backup save")
	grace := fs.Duration("tombstone-grace", antientropy.DefaultGrace, "the backed-up cluster's --tombstone-grace: tombstones older than this at backup time are not restored")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *from == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: backup restore --from DIR", errUsage)
	}
	b, err := os.ReadFile(filepath.Join(*from, backupIndexName))
	if err != nil {
		return fmt.Errorf("not a complete backup: %w", err)
	}
	var idx backupIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("%s: %w", backupIndexName, err)
	}
	sort.Strings(idx.Nodes)
	for i, node := range idx.Nodes {
		n, err := restoreNode(ctx, c, c.addrs[i%len(c.addrs)], filepath.Join(*from, node+".tar"), *grace)
		if err != nil {
			return fmt.Errorf("restore of %s: %w", node, err)
		}
		fmt.Fprintf(stdout, "%s: %d keys loaded\n", node, n)
	}
	if idx.CPRevision == 0 {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(*from, cpSnapshotName))
	if err != nil {
		return err
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	err = retry(ctx, 10, func() error {
		return c.postJSONBody(ctx, c.addrs[0], "/admin/v1/cp/restore", "application/octet-stream", data, &res)
	})
	if err != nil {
		return fmt.Errorf("consensus tier restore: %w", err)
	}
	fmt.Fprintf(stdout, "consensus tier: snapshot of revision %d restored (now at revision %d)\n", idx.CPRevision, res.Revision)
	return nil
}

// restoreNode loads one node's checkpoint into the cluster through addr.
func restoreNode(ctx context.Context, c *client, addr, archive string, grace time.Duration) (int, error) {
	dir, err := os.MkdirTemp("", "kvctl-restore-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	m, err := extract(archive, dir)
	if err != nil {
		return 0, err
	}
	st, err := storage.Open(dir, storage.Options{NoSync: true})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var batch bytes.Buffer
	count, inBatch := 0, 0
	flush := func() error {
		if inBatch == 0 {
			return nil
		}
		body := batch.Bytes()
		err := retry(ctx, 5, func() error {
			return c.postJSONBody(ctx, addr, "/admin/v1/restore", "application/octet-stream", body, nil)
		})
		batch.Reset()
		inBatch = 0
		return err
	}
	var scanErr error
	err = st.Scan(ring.Range{}, nil, m.CreatedAt.Add(-grace), func(e storage.Entry) bool {
		if _, scanErr = protodelim.MarshalTo(&batch, &kvv1.Entry{Key: e.Key, Siblings: &kvv1.Siblings{Records: e.Records}}); scanErr != nil {
			return false
		}
		count++
		if inBatch++; inBatch == restoreBatch {
			scanErr = flush()
		}
		return scanErr == nil
	})
	if err == nil {
		err = scanErr
	}
	if err == nil {
		err = flush()
	}
	return count, err
}

// postJSONBody posts raw bytes and decodes a JSON answer into out (nil:
// ignored).
func (c *client) postJSONBody(ctx context.Context, addr, path, contentType string, body []byte, out any) error {
	resp, err := c.post(ctx, addr, path, contentType, bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
