package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The envoyproxy/ratelimit file format, parsed here rather than through
// envoyproxy/ratelimit's own src/config package: that package pulls its
// stats, logging and settings stack (and their module graph) into ours for
// about a hundred lines of YAML mapping. Fields are as documented in its
// README; unknown fields are errors, as there. Scalars are read as written
// (yaml.v3 into string fields): `value: n` or `value: 01` stay strings, as
// with the yaml.v2 decoder envoyproxy/ratelimit uses, where a YAML→JSON
// conversion would turn them into false and 1.
type yamlFile struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	QuotaMode      bool             `yaml:"quota_mode"`
}

type yamlRateLimit struct {
	Unit            string        `yaml:"unit"`
	RequestsPerUnit uint32        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Name            string        `yaml:"name"`
	Replaces        []yamlReplace `yaml:"replaces"`
}

type yamlReplace struct {
	Name string `yaml:"name"`
}

var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

// ParseYAML reads one envoyproxy/ratelimit config document. Its limits are
// fixed-window, fail-open rules. name labels the rules' IDs.
func ParseYAML(name string, data []byte) (domain string, rs []*Rule, err error) {
	var f yamlFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return "", nil, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
	}
	rs, err = f.rules(name, SourceFile, "file:")
	return f.Domain, rs, err
}

// rules compiles one domain's descriptor tree; rule IDs are idPrefix +
// domain + ":" + descriptor path.
func (f *yamlFile) rules(name, source, idPrefix string) (rs []*Rule, err error) {
	if f.Domain == "" {
		return nil, fmt.Errorf("%w: %s: domain is required", ErrInvalid, name)
	}
	var walk func(prefix []Entry, ds []yamlDescriptor) error
	walk = func(prefix []Entry, ds []yamlDescriptor) error {
		seen := map[Entry]bool{}
		for _, d := range ds {
			if d.Key == "" {
				return fmt.Errorf("%w: %s: descriptor key must not be empty", ErrInvalid, name)
			}
			e := Entry{Key: d.Key, Value: d.Value}
			if d.ShareThreshold {
				if !strings.HasSuffix(d.Value, "*") {
					return fmt.Errorf("%w: %s: share_threshold can only be used with wildcard values (ending with '*'), but found %s=%s", ErrInvalid, name, d.Key, d.Value)
				}
				e.Shared = true
			}
			if seen[Entry{Key: d.Key, Value: d.Value}] {
				return fmt.Errorf("%w: %s: duplicate descriptor %s=%s", ErrInvalid, name, d.Key, d.Value)
			}
			seen[Entry{Key: d.Key, Value: d.Value}] = true
			path := append(slices.Clone(prefix), e)
			if rl := d.RateLimit; rl != nil {
				r := &Rule{Source: source, Name: rl.Name, Domain: f.Domain, Descriptors: path,
					Algorithm: FixedWindow, Unlimited: rl.Unlimited, Limit: rl.RequestsPerUnit}
				// quota_mode (over-limit reported in dynamic metadata, request
				// allowed) is served as shadow mode: allowed, counted, logged.
				if d.ShadowMode || d.QuotaMode {
					r.Mode = Shadow
				}
				r.ID = idPrefix + f.Domain + ":" + r.path()
				for _, rp := range rl.Replaces {
					if rp.Name == "" {
						return fmt.Errorf("%w: %s: %s: replaces needs a name", ErrInvalid, name, r.path())
					}
					r.Replaces = append(r.Replaces, rp.Name)
				}
				w, ok := units[strings.ToUpper(rl.Unit)]
				if rl.Unlimited && ok {
					return fmt.Errorf("%w: %s: %s: should not specify rate limit unit when unlimited", ErrInvalid, name, r.path())
				}
				if !rl.Unlimited {
					if !ok {
						return fmt.Errorf("%w: %s: %s: invalid rate limit unit %q", ErrInvalid, name, r.path(), rl.Unit)
					}
					r.Window = w
				}
				if err := r.Validate(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				rs = append(rs, r)
			} else if len(d.Descriptors) == 0 {
				// Declared without a limit: whitelisted, and it must
				// shadow its siblings (a nested descriptor makes the node
				// exist already).
				r := &Rule{Source: source, Domain: f.Domain, Descriptors: path, Algorithm: FixedWindow, NoLimit: true}
				r.ID = idPrefix + f.Domain + ":" + r.path()
				if err := r.Validate(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				rs = append(rs, r)
			}
			if err := walk(path, d.Descriptors); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, f.Descriptors); err != nil {
		return nil, err
	}
	return rs, nil
}

// LoadDir parses every *.yaml and *.yml file directly in dir (one domain per
// file, as in envoyproxy/ratelimit). The version is a digest of the files'
// names and contents. An empty dir name yields no rules.
func LoadDir(dir string) (rs []*Rule, version string, err error) {
	if dir == "" {
		return nil, "", nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("rules: read %s: %w", dir, err)
	}
	h := sha256.New()
	domains := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, "", fmt.Errorf("rules: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(data))
		h.Write(data)
		d, fr, err := ParseYAML(n, data)
		if err != nil {
			return nil, "", err
		}
		if other, dup := domains[d]; dup {
			return nil, "", fmt.Errorf("%w: %s: domain %q already defined in %s", ErrInvalid, n, d, other)
		}
		domains[d] = n
		rs = append(rs, fr...)
	}
	return rs, hex.EncodeToString(h.Sum(nil))[:16], nil
}
