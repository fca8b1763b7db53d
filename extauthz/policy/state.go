package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/atomicfile"
)

// StateFile is the name of the persisted policy's manifest inside the
// state directory.
//
// The state directory holds the manifest and one file per ApiKeyShard,
// named shard-<SHA-256 of its content>.pb and holding the encoded shard
// (the Any's value). The manifest has, per type, the version and the
// resources: inline (JWT providers, revocations) or by shard file name. A
// shard file is never rewritten, since its name is its content: a write
// creates the shard files missing, each atomically; then replaces the
// manifest atomically; then removes the shard files no longer named. A
// crash at any point leaves the old manifest or the new one, each with
// every file it names, never a torn policy; files left unnamed by a crash
// go at the next write. So an update rewrites the shards it changed and
// the manifest, not a million keys. A state directory has one writer.
const StateFile = "policy.json"

// state is the manifest: per type, the version and each resource as the
// serialized google.protobuf.Any (base64 in JSON), or the name of the
// shard file holding the Any's value.
type state struct {
	SavedAt time.Time                `json:"savedAt"`
	Types   map[string]persistedType `json:"types"`
}

type persistedType struct {
	Version   string   `json:"version"`
	Resources [][]byte `json:"resources"`
	Files     []string `json:"files,omitempty"`
}

const (
	shardFilePrefix = "shard-"
	shardFileSuffix = ".pb"
)

// Save writes res to dir synchronously (see StateFile for the layout),
// hashing every shard to find the files already there. The files hold no
// secrets: API keys are only hashes. res is expected to be a policy Build
// accepted.
func Save(dir string, res Resources, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	files := map[*anypb.Any]string{}
	for _, a := range res[ApiKeyShardType].Resources {
		if a.GetTypeUrl() == ApiKeyShardType {
			name, err := writeShardFile(dir, a.GetValue())
			if err != nil {
				return fmt.Errorf("policy: save: %w", err)
			}
			files[a] = name
		}
	}
	return commit(dir, res, files, now)
}

// writeShardFile stores an encoded shard under its content's name unless
// that file exists (then it holds these very bytes) and returns the name.
func writeShardFile(dir string, value []byte) (string, error) {
	sum := sha256.Sum256(value)
	name := shardFilePrefix + hex.EncodeToString(sum[:]) + shardFileSuffix
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return name, nil
	}
	if err := atomicfile.Write(path, value, 0o600); err != nil {
		return "", err
	}
	return name, nil
}

// commit writes the manifest of res, whose resources in files are already
// in the named shard files, then removes the shard files it does not name.
func commit(dir string, res Resources, files map[*anypb.Any]string, now time.Time) error {
	st := state{SavedAt: now.UTC(), Types: map[string]persistedType{}}
	keep := map[string]bool{}
	for t, tr := range res {
		pt := persistedType{Version: tr.Version, Resources: [][]byte{}}
		for _, a := range tr.Resources {
			if name := files[a]; name != "" {
				pt.Files = append(pt.Files, name)
				keep[name] = true
				continue
			}
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
			if err != nil {
				return fmt.Errorf("policy: save: %w", err)
			}
			pt.Resources = append(pt.Resources, b)
		}
		st.Types[t] = pt
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, StateFile), b, 0o600); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	removeUnnamed(dir, keep)
	return nil
}

// removeUnnamed deletes the shard files not in keep, and temporary files a
// crashed write left. Best effort: what stays is retried at the next write
// and never read, since no manifest names it.
func removeUnnamed(dir string, keep map[string]bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		if isShardFile(n) && !keep[n] || strings.HasPrefix(n, "."+shardFilePrefix) || strings.HasPrefix(n, "."+StateFile+".tmp-") {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}

// isShardFile reports whether name is one writeShardFile makes.
func isShardFile(name string) bool {
	h, ok := strings.CutPrefix(name, shardFilePrefix)
	if !ok {
		return false
	}
	h, ok = strings.CutSuffix(h, shardFileSuffix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// Load reads the resources Save or a Saver wrote to dir, checking every
// shard file against its name. It returns ErrNoState when there is none,
// and an error wrapping ErrBadState when a shard file is missing or
// damaged.
func Load(dir string) (Resources, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoState
	}
	if err != nil {
		return nil, fmt.Errorf("policy: load: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("policy: load %s: %w", StateFile, err)
	}
	res := Resources{}
	for t, pt := range st.Types {
		tr := TypeResources{Version: pt.Version}
		for _, raw := range pt.Resources {
			a := &anypb.Any{}
			if err := proto.Unmarshal(raw, a); err != nil {
				return nil, fmt.Errorf("policy: load %s: %w", StateFile, err)
			}
			tr.Resources = append(tr.Resources, a)
		}
		for _, name := range pt.Files {
			if !isShardFile(name) {
				return nil, fmt.Errorf("%w: %s names %q", ErrBadState, StateFile, name)
			}
			v, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadState, err)
			}
			if sum := sha256.Sum256(v); name != shardFilePrefix+hex.EncodeToString(sum[:])+shardFileSuffix {
				return nil, fmt.Errorf("%w: %s does not hold what its name says", ErrBadState, name)
			}
			tr.Resources = append(tr.Resources, &anypb.Any{TypeUrl: t, Value: v})
		}
		res[t] = tr
	}
	return res, nil
}

// SaverConfig configures a Saver.
type SaverConfig struct {
	// Dir is the state directory (required).
	Dir    string
	Logger *slog.Logger
	// TimeNow stamps each write (default time.Now).
	TimeNow func() time.Time
	// Saved, when set, is called after each write with the policy written
	// and the error (a test hook). It runs on Run's goroutine, so the next
	// write waits for it.
	Saved func(p *Policy, err error)
}

// Saver persists policies in the background, so that applying (and
// ACKing) an update never waits for the disk. Writes coalesce: at most one
// is in flight, and the policies handed to Save meanwhile replace each
// other, only the newest being written. A write stores the shards that
// changed since the previous one (recognized by the shared index BuildFrom
// keeps) and the manifest; see StateFile.
//
// Save may be called from any goroutine, before or while Run runs. Nothing
// is written unless Run runs; when its context ends, Run writes the policy
// still pending, if any, before it returns, so a clean shutdown persists
// the last policy handed over. A failed write is logged and not retried:
// the next policy retries, and the directory keeps the last one written.
type Saver struct {
	cfg  SaverConfig
	wake chan struct{} // capacity 1: a write is due

	mu      sync.Mutex
	pending *Policy

	// Owned by Run: the policy last written and its shards' files.
	last    *Policy
	written [NumShards]writtenShard
}

type writtenShard struct {
	shard *keyShard
	file  string
}

// NewSaver returns a Saver for cfg.
func NewSaver(cfg SaverConfig) (*Saver, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: Dir is required", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TimeNow == nil {
		cfg.TimeNow = time.Now
	}
	return &Saver{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Save hands p over to be written; it never blocks. p replaces any policy
// handed over before and not yet written.
func (s *Saver) Save(p *Policy) {
	s.mu.Lock()
	s.pending = p
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run writes the policies handed to Save until ctx ends, then the one
// still pending, and returns nil.
func (s *Saver) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			s.writePending()
			return nil
		case <-s.wake:
			s.writePending()
		}
	}
}

func (s *Saver) writePending() {
	s.mu.Lock()
	p := s.pending
	s.pending = nil
	s.mu.Unlock()
	if p == nil || p == s.last {
		return
	}
	err := s.write(p)
	if err != nil {
		s.cfg.Logger.Error("extauthz: persisting the policy failed (still serving it)", "dir", s.cfg.Dir, "err", err)
	}
	if s.cfg.Saved != nil {
		s.cfg.Saved(p, err)
	}
}

// write persists p, writing only the shard files of shards not in the
// last write.
func (s *Saver) write(p *Policy) error {
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	var next [NumShards]writtenShard
	files := make(map[*anypb.Any]string, NumShards)
	for i, sh := range p.shards {
		if sh == nil {
			continue
		}
		name := s.written[i].file
		if s.written[i].shard != sh {
			var err error
			if name, err = writeShardFile(s.cfg.Dir, sh.src.GetValue()); err != nil {
				return fmt.Errorf("policy: save: %w", err)
			}
		}
		files[sh.src] = name
		next[i] = writtenShard{shard: sh, file: name}
	}
	if err := commit(s.cfg.Dir, p.Raw, files, s.cfg.TimeNow()); err != nil {
		return err
	}
	s.last, s.written = p, next
	return nil
}
