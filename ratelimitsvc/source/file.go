// Package source feeds rules into a rules.Live: a poller for YAML files in
// envoyproxy/ratelimit's format, and an ADS client for the control plane's
// RateLimitRule resources with ACK/NACK and a last-good copy on disk.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/portico-io/portico/ratelimitsvc/rules"
)

// Sink receives a source's complete rule set; it keeps its current rules
// when it returns an error. *rules.Live is one.
type Sink interface {
	Update(source, version string, rs []*rules.Rule) error
}

var _ Sink = (*rules.Live)(nil)

// RejectRecorder is implemented by sinks that want to hear of every rule
// set a source rejected: unparsable as well as refused by Update.
type RejectRecorder interface {
	Rejected(source string, err error)
}

func rejected(s Sink, source string, err error) {
	if r, ok := s.(RejectRecorder); ok {
		r.Rejected(source, err)
	}
}

// DefaultPollInterval is how often File looks for changed files.
const DefaultPollInterval = time.Second

// File loads a directory of YAML rule files and reloads it when a file's
// name or content changes. A bad edit is logged and the previous rules
// stay.
type File struct {
	Dir      string
	Interval time.Duration // default DefaultPollInterval
	Sink     Sink
	Logger   *slog.Logger
	// OnPass, when set, is called after every pass with the error (nil when
	// loaded or unchanged); a test hook.
	OnPass func(err error)

	sig     string // of the directory last applied
	lastErr string // last failure logged
}

// Load runs one pass: parse and apply the directory if it changed.
func (f *File) Load() error {
	sig, err := signature(f.Dir)
	if err == nil && sig != f.sig {
		var rs []*rules.Rule
		var version string
		if rs, version, err = rules.LoadDir(f.Dir); err == nil {
			if err = f.Sink.Update(rules.SourceFile, version, rs); err == nil {
				f.sig, f.lastErr = sig, ""
				f.logger().Info("rate-limit rule files loaded", "dir", f.Dir, "version", version, "rules", len(rs))
			}
		}
	}
	if err != nil {
		// Retried on every pass; each distinct failure is logged and
		// reported once.
		if msg := err.Error(); msg != f.lastErr {
			rejected(f.Sink, rules.SourceFile, err)
			f.logger().Error("rate-limit rule files rejected; keeping the previous rules", "dir", f.Dir, "err", err)
			f.lastErr = msg
		}
	}
	if f.OnPass != nil {
		f.OnPass(err)
	}
	return err
}

// Run polls until ctx is done. Call Load first for the boot load.
func (f *File) Run(ctx context.Context) error {
	iv := f.Interval
	if iv <= 0 {
		iv = DefaultPollInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = f.Load()
		}
	}
}

func (f *File) logger() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

// signature digests every rule file's name and content (the files LoadDir
// reads). Contents rather than
// mtimes: file timestamps are coarse (a few ms), so two same-size writes in
// one tick would look unchanged. Rule directories are small; reading them
// once per poll is cheap.
func signature(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("source: %w", err)
	}
	h := sha256.New()
	for _, e := range ents { // sorted by name
		if n := e.Name(); e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("source: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
