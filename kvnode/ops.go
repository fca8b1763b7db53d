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
	"github.com/portico-io/portico/kvnode/ring"
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
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	if s := n.mem.Self().State; s != kvv1.MemberState_MEMBER_STATE_NORMAL {
		return api.CleanupResult{}, fmt.Errorf("%w: this node is %s; only a NORMAL node cleans up", api.ErrConflict, stateName(s))
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

// Replace implements api.Ops (Cassandra's replace_address, etcd's member
// replace): this node, new and without tokens (started with --join-mode
// manual), takes over the tokens of a dead NORMAL node of the same rack.
// In one announced step it becomes JOINING with those tokens and marks the
// dead node LEAVING, so coordinators write to it as the pending owner of
// exactly the dead node's ranges; it streams those ranges from every live
// replica, compares each with each live replica by Merkle tree (repairing
// what differs), then turns NORMAL as the dead node turns LEFT, in one
// announced step. A node replaced while down stands down if it returns.
// Safe to call again after a failure (it resumes, also after a restart).
func (n *Node) Replace(ctx context.Context, dead string) (api.ReplaceResult, error) {
	n.moveMu.Lock()
	self := n.mem.Self()
	if self.State == kvv1.MemberState_MEMBER_STATE_JOINING {
		was, err := n.st.GetMeta(metaReplacing)
		n.moveMu.Unlock()
		if err != nil {
			return api.ReplaceResult{}, err
		}
		if string(was) != dead {
			return api.ReplaceResult{}, fmt.Errorf("%w: this node is already joining (replacing %q)", api.ErrConflict, was)
		}
		return n.finishReplace(ctx, dead)
	}
	err := n.startReplace(self, dead)
	n.moveMu.Unlock()
	if err != nil {
		return api.ReplaceResult{}, err
	}
	return n.finishReplace(ctx, dead)
}

// startReplace checks the replacement is safe and takes the dead node's
// tokens (JOINING, dead node LEAVING), persisted; n.moveMu held.
func (n *Node) startReplace(self *kvv1.Member, dead string) error {
	bad := func(msg string, args ...any) error {
		return fmt.Errorf("%w: cannot replace %s: %s", api.ErrConflict, dead, fmt.Sprintf(msg, args...))
	}
	if self.State != kvv1.MemberState_MEMBER_STATE_PENDING {
		return bad("this node is %s; start a new node (new id, empty data dir, --join-mode manual) to replace it", stateName(self.State))
	}
	if dead == self.Id {
		return bad("a node cannot replace itself; give the new node a new id")
	}
	m, ok := n.mem.Member(dead)
	switch {
	case !ok:
		return bad("no such member (known: %v)", n.memberIDs())
	case m.State != kvv1.MemberState_MEMBER_STATE_NORMAL || len(m.Tokens) == 0:
		return bad("it is %s; only a NORMAL member holding tokens can be replaced", stateName(m.State))
	case n.mem.Alive(dead):
		return bad("it is alive as this node sees it; replace only a dead node (decommission a live one)")
	case m.Rack != self.Rack:
		return bad("it is in rack %q and this node in %q: a replacement keeps the replica placement, so it must be in the same rack", m.Rack, self.Rack)
	}
	cur, fut := n.mem.Rings()
	if len(cur.Ranges()) != len(fut.Ranges()) || !sameRanges(cur.Ranges(), fut.Ranges()) {
		return bad("a join or leave is in progress; one ring change at a time")
	}
	if err := n.st.PutMeta(metaReplacing, []byte(dead)); err != nil {
		return err
	}
	return n.persistTakeover(kvv1.MemberState_MEMBER_STATE_JOINING, m.Tokens, dead, kvv1.MemberState_MEMBER_STATE_LEAVING)
}

func (n *Node) memberIDs() []string {
	var ids []string
	for _, m := range n.mem.Snapshot() {
		ids = append(ids, m.Id)
	}
	return ids
}

// persistTakeover is persistSelf for a replacement: the local state and
// the dead node's change in one membership step (Membership.Takeover).
func (n *Node) persistTakeover(state kvv1.MemberState, tokens []uint64, dead string, deadState kvv1.MemberState) error {
	if tokens != nil {
		if err := n.st.PutMeta(metaTokens, encodeTokens(tokens)); err != nil {
			return err
		}
	}
	if err := n.st.PutMeta(metaState, []byte{byte(state)}); err != nil {
		return err
	}
	if !n.mem.Takeover(state, tokens, dead, deadState) {
		return fmt.Errorf("kvnode: %s is not a member", dead)
	}
	n.savePeers()
	return nil
}

// finishReplace announces the takeover, streams and verifies the ranges,
// then flips ownership; idempotent.
func (n *Node) finishReplace(ctx context.Context, dead string) (ReplaceResult, error) {
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	res := ReplaceResult{Node: n.cfg.NodeID, Replaced: dead, Tokens: n.mem.Self().Tokens}
	if err := n.announce(ctx); err != nil {
		return res, err
	}
	var err error
	if res.KeysStreamed, err = n.pullGained(ctx); err != nil {
		return res, err
	}
	// Verify: every range this node will serve, against every other live
	// replica of it (one tree request per peer). Writes racing the stream
	// reach this node as pending owner, so differences left here are rare;
	// they are repaired both ways.
	_, fut := n.mem.Rings()
	byPeer := map[string][]ring.Range{}
	for _, rg := range fut.RangesOf(n.cfg.NodeID) {
		verified := 0
		for _, peer := range rg.Replicas {
			if peer != n.cfg.NodeID && n.mem.Alive(peer) {
				byPeer[peer] = append(byPeer[peer], rg)
				verified++
			}
		}
		if verified == 0 {
			return res, fmt.Errorf("%w: range (%d,%d]: no live replica to verify it against", api.ErrConflict, rg.Start, rg.End)
		}
	}
	for peer, ranges := range byPeer {
		pulled, pushed, err := n.rep.RepairRanges(ctx, ranges, peer)
		if err != nil {
			return res, fmt.Errorf("kvnode: verifying ranges with %s: %w", peer, err)
		}
		res.KeysRepaired += pulled + pushed
		res.RangesVerified += len(ranges)
	}
	if err := n.persistTakeover(kvv1.MemberState_MEMBER_STATE_NORMAL, nil, dead, kvv1.MemberState_MEMBER_STATE_LEFT); err != nil {
		return res, err
	}
	if err := n.st.PutMeta(metaReplacing, nil); err != nil {
		return res, err
	}
	n.cfg.Logger.Info("kvnode: replaced", "dead", dead, "keys_streamed", res.KeysStreamed, "keys_repaired", res.KeysRepaired)
	return res, n.announce(ctx)
}
