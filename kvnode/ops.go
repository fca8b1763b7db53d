package kvnode

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/membership"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Day-2 operations (issue 23): backup of the ring data, loading a backup
// into a cluster, cleanup of ranges no longer owned, and replacement of a
// dead node. The consensus tier's snapshot and restore are cp's
// (SaveSnapshot, RestoreSnapshot).

// BackupFormat names the archive layout of POST /admin/v1/backup: a tar
// holding BackupManifestName, then the files of a pebble checkpoint of the
// node's store under BackupRingDir.
const (
	BackupFormat       = "kvnode-backup/1"
	BackupManifestName = "manifest.json"
	BackupRingDir      = "ring/"
	// backupTmpDir (in the data directory, so checkpoints hard-link the
	// SSTables) holds checkpoints while they are streamed; it is emptied
	// at start.
	backupTmpDir = ".backup-tmp"
	// loadWorkers is how many entries a load writes at once.
	loadWorkers = 8
)

// BackupManifest describes one node's backup.
type BackupManifest struct {
	Format      string    `json:"format"`
	Node        string    `json:"node"`
	CreatedAt   time.Time `json:"createdAt"`
	Replication int       `json:"replication"`
	Tokens      []uint64  `json:"tokens"`
}

var _ api.Ops = (*Node)(nil)

// Backup implements api.Ops: a pebble checkpoint of the store, taken now
// (every write this replica applied before the call is in it), streamed
// as a tar. A QUORUM write acknowledged before backups of every node
// started is therefore in at least W of them.
func (n *Node) Backup(context.Context) (api.Archive, error) {
	parent := filepath.Join(n.cfg.DataDir, backupTmpDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("kvnode: backup: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "ckpt-")
	if err != nil {
		return nil, fmt.Errorf("kvnode: backup: %w", err)
	}
	dir := filepath.Join(tmp, "ring")
	m := BackupManifest{Format: BackupFormat, Node: n.cfg.NodeID, CreatedAt: n.cfg.Now().UTC(), Replication: n.cfg.Replication, Tokens: n.mem.Self().Tokens}
	if err := n.st.Checkpoint(dir); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	return &archive{tmp: tmp, dir: dir, manifest: m}, nil
}

// archive streams a checkpoint directory as a tar and removes it on Close.
type archive struct {
	tmp, dir string
	manifest BackupManifest
}

func (a *archive) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	mb, err := json.MarshalIndent(a.manifest, "", "  ")
	if err != nil {
		return 0, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: BackupManifestName, Mode: 0o600, Size: int64(len(mb)), ModTime: a.manifest.CreatedAt}); err != nil {
		return cw.n, err
	}
	if _, err := tw.Write(mb); err != nil {
		return cw.n, err
	}
	err = filepath.WalkDir(a.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(a.dir, path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(&tar.Header{Name: BackupRingDir + filepath.ToSlash(rel), Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	return cw.n, err
}

func (a *archive) Close() error { return os.RemoveAll(a.tmp) }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n += int64(k)
	return k, err
}

// The day-2 answers, under the names kvnode exported them by.
type (
	LoadResult    = api.LoadResult
	CleanupResult = api.CleanupResult
	ReplaceResult = api.ReplaceResult
)

// Load implements api.Ops: each entry of r (varint-delimited kvv1.Entry,
// as kvctl reads them from backups) is written with its own timestamps to
// the replicas of its key in this cluster at QUORUM (hints for the rest),
// so the restored data is placed by this cluster's ring, whatever the
// backed-up cluster's shape was. Replicas merge, so loading is idempotent
// (several replicas' backups of one key, or a retried load, end in one
// version) and never overrides a newer write. The first failure stops the
// load; what was written stays, and loading again is safe.
func (n *Node) Load(ctx context.Context, r io.Reader) (api.LoadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	entries := make(chan *kvv1.Entry, loadWorkers)
	var keys atomic.Int64
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; cancel() })
	}
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range entries {
				n.gate.RLock()
				_, err := n.coord.ApplyEntry(ctx, e, coordinator.Quorum)
				n.gate.RUnlock()
				if err != nil {
					fail(fmt.Errorf("kvnode: restore %q: %w", e.Key, err))
					continue
				}
				keys.Add(1)
			}
		}()
	}
	br := bufio.NewReader(r)
	for i := 0; ctx.Err() == nil; i++ {
		e := &kvv1.Entry{}
		err := protodelim.UnmarshalFrom(br, e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && (len(e.Key) == 0 || len(e.Key) > api.MaxKeyBytes || len(e.GetSiblings().GetRecords()) == 0) {
			err = errors.New("an entry needs a key of 1-256 bytes and at least one record")
		}
		if ks := coordinator.Keyspace(e.Key); err == nil && slices.Contains(n.cfg.CPKeyspaces, ks) {
			// Written to the ring it would be hidden behind the Raft group
			// that serves the keyspace here: refuse rather than bury it.
			err = fmt.Errorf("keyspace %q is served by the consensus tier on this cluster (--cp-keyspaces), not the ring", ks)
		}
		if err != nil {
			fail(&api.BadRequest{Status: http.StatusBadRequest, Code: "invalid_entry", Field: fmt.Sprintf("entries[%d]", i), Message: err.Error()})
			break
		}
		select {
		case entries <- e:
		case <-ctx.Done():
		}
	}
	close(entries)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return api.LoadResult{}, fmt.Errorf("%w (%d keys written before; loading again is safe)", firstErr, keys.Load())
	}
	return api.LoadResult{Keys: keys.Load()}, nil
}

// Cleanup implements api.Ops (Cassandra's nodetool cleanup): delete the
// keys of every range this node replicates in neither the current nor the
// pending ring, left behind when a join or a replacement moved the range
// away. It holds the ring-change barrier while it decides and deletes, so
// a ring change that would give this node a range waits until the range
// is deleted (and is then streamed in afresh). Only a NORMAL node cleans.
func (n *Node) Cleanup(context.Context) (api.CleanupResult, error) {
	defer n.moves.HoldMoves()()
	if s := n.mem.Self().State; s != kvv1.MemberState_MEMBER_STATE_NORMAL {
		return api.CleanupResult{}, fmt.Errorf("%w: this node is %s; only a NORMAL node cleans up", api.ErrConflict, membership.StateName(s))
	}
	n.gate.RLock()
	cur, fut := n.mem.Rings()
	keep := append(cur.RangesOf(n.cfg.NodeID), fut.RangesOf(n.cfg.NodeID)...)
	if len(keep) == 0 {
		n.gate.RUnlock()
		return api.CleanupResult{}, fmt.Errorf("%w: this node replicates no range; cleanup would delete everything", api.ErrConflict)
	}
	cl, err := n.st.DeleteOutside(keep)
	n.gate.RUnlock()
	if err != nil {
		return api.CleanupResult{}, err
	}
	if err := n.st.CompactCleaned(cl); err != nil {
		n.cfg.Logger.Warn("kvnode: compacting after cleanup", "err", err)
	}
	n.cfg.Logger.Info("kvnode: cleanup", "keys_deleted", cl.Deleted)
	return api.CleanupResult{KeysDeleted: cl.Deleted, RangesKept: len(keep)}, nil
}

// Replace implements api.Ops (membership.Protocol.Replace): this node,
// new and without tokens (started with --join-mode manual), takes over
// the tokens of a dead NORMAL node of the same rack, streams its ranges
// and verifies them by repair. Safe to call again after a failure.
func (n *Node) Replace(ctx context.Context, dead string) (api.ReplaceResult, error) {
	r, err := n.moves.Replace(ctx, dead)
	if err != nil {
		return api.ReplaceResult{}, conflictErr(err)
	}
	return api.ReplaceResult{
		Node: r.Node, Replaced: r.Replaced, Tokens: r.Tokens,
		KeysStreamed: r.KeysStreamed, RangesVerified: r.RangesVerified, KeysRepaired: r.KeysRepaired,
	}, nil
}

// conflictErr makes a refusal of the membership protocol an
// api.ErrConflict (409), its message unchanged.
func conflictErr(err error) error {
	if errors.Is(err, membership.ErrConflict) {
		return conflict{err}
	}
	return err
}

type conflict struct{ error }

func (c conflict) Unwrap() []error { return []error{c.error, api.ErrConflict} }
