package namespace

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/internal/filepoll"
)

// fileSpec is the YAML shape of a namespaces file:
//
//	namespaces:
//	  orders:
//	    secret: s3cret            # or secretSHA256: <hex>
//	    maxmemory: 256mb
//	    policy: allkeys-lfu       # allkeys-lru (default) | allkeys-lfu | volatile-ttl | noeviction
//	    defaultTTL: 10m
//	    maxValueSize: 512kb       # default 1mb
//	    opsPerSecond: 50000
//	    bytesPerSecond: 100mb
//	    prefixDepth: 1
//	    hotKeySampleEvery: 100
type fileSpec struct {
	Namespaces map[string]nsSpec `yaml:"namespaces"`
}

type nsSpec struct {
	Secret            string  `yaml:"secret"`
	SecretSHA256      string  `yaml:"secretSHA256"`
	MaxMemory         string  `yaml:"maxmemory"`
	Policy            string  `yaml:"policy"`
	DefaultTTL        string  `yaml:"defaultTTL"`
	MaxValueSize      string  `yaml:"maxValueSize"`
	OpsPerSecond      float64 `yaml:"opsPerSecond"`
	BytesPerSecond    string  `yaml:"bytesPerSecond"`
	PrefixDepth       int     `yaml:"prefixDepth"`
	PrefixSeparator   string  `yaml:"prefixSeparator"`
	MaxPrefixes       int     `yaml:"maxPrefixes"`
	HotKeySampleEvery int     `yaml:"hotKeySampleEvery"`
}

// Parse reads a namespaces file. Unknown fields are errors, so a typo does
// not silently leave a tenant without its limit.
func Parse(data []byte) ([]Settings, error) {
	var spec fileSpec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&spec); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if spec.Namespaces == nil {
		// An empty or half-written file must not read as "remove every
		// namespace" (which drops their data).
		return nil, fmt.Errorf("%w: no namespaces: map (an empty file is rejected)", ErrConfig)
	}
	var out []Settings
	for name, ns := range spec.Namespaces {
		s := Settings{Name: name, OpsPerSecond: ns.OpsPerSecond, PrefixDepth: ns.PrefixDepth,
			PrefixSeparator: ns.PrefixSeparator, MaxPrefixes: ns.MaxPrefixes, HotKeySampleEvery: ns.HotKeySampleEvery}
		field := func(f string, err error) error {
			return fmt.Errorf("%w: namespaces.%s.%s: %w", ErrConfig, name, f, err)
		}
		switch {
		case ns.Secret != "" && ns.SecretSHA256 != "":
			return nil, field("secret", fmt.Errorf("set secret or secretSHA256, not both"))
		case ns.Secret != "":
			s.Secret, s.HasSecret = sha256Sum(ns.Secret), true
		case ns.SecretSHA256 != "":
			b, err := hex.DecodeString(ns.SecretSHA256)
			if err != nil || len(b) != 32 {
				return nil, field("secretSHA256", fmt.Errorf("want 64 hex digits"))
			}
			copy(s.Secret[:], b)
			s.HasSecret = true
		}
		var err error
		if s.MaxMemory, err = optBytes(ns.MaxMemory); err != nil {
			return nil, field("maxmemory", err)
		}
		if s.MaxValueSize, err = optBytes(ns.MaxValueSize); err != nil {
			return nil, field("maxValueSize", err)
		}
		bw, err := optBytes(ns.BytesPerSecond)
		if err != nil {
			return nil, field("bytesPerSecond", err)
		}
		s.BytesPerSecond = float64(bw)
		if ns.Policy != "" {
			if s.Policy, err = evict.Parse(ns.Policy); err != nil {
				return nil, field("policy", err)
			}
		}
		if ns.DefaultTTL != "" {
			if s.DefaultTTL, err = time.ParseDuration(ns.DefaultTTL); err != nil {
				return nil, field("defaultTTL", err)
			}
		}
		if err := validate(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func optBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return ParseBytes(s)
}

// Watcher re-reads a namespaces file when its content changes and applies
// it to a Registry. A file that fails to parse is logged and ignored: the
// node keeps its last good configuration. Replace the file atomically
// (write a temporary file and rename it, as Kubernetes does for ConfigMap
// volumes): a half-written file that still parses would be applied.
type Watcher struct {
	Path     string
	Registry *Registry
	// Interval between checks (default 2s).
	Interval time.Duration
	Logger   *slog.Logger
	// OnCheck, when set, is called after every check with whether the file
	// was applied and the error, if any (a test signal).
	OnCheck func(applied bool, err error)
	last    []byte
}

// Load reads and applies the file once.
func (w *Watcher) Load() error {
	_, err := w.check()
	return err
}

func (w *Watcher) check() (bool, error) {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		return false, fmt.Errorf("namespace: read %s: %w", w.Path, err)
	}
	if w.last != nil && bytes.Equal(data, w.last) {
		return false, nil
	}
	set, err := Parse(data)
	if err != nil {
		return false, err
	}
	if err := w.Registry.Apply(set); err != nil {
		return false, err
	}
	w.last = data
	return true, nil
}

// Run checks every Interval until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	filepoll.Run(ctx, w.Interval, w.check, func(applied bool, err error) {
		if err != nil && w.Logger != nil {
			w.Logger.Error("namespaces file rejected; keeping the last good one", "path", w.Path, "err", err)
		} else if applied && w.Logger != nil {
			w.Logger.Info("namespaces reloaded", "path", w.Path)
		}
		if w.OnCheck != nil {
			w.OnCheck(applied, err)
		}
	})
	return nil
}
