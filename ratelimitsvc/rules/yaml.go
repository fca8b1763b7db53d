package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// The envoyproxy/ratelimit file format, parsed here rather than through
// envoyproxy/ratelimit's own src/config package: that package pulls its
// stats, logging and settings stack (and their module graph) into ours for
// about a hundred lines of YAML mapping. Fields are as documented in its
// README; unknown fields are errors, as there.
type yamlFile struct {
	Domain      string           `json:"domain"`
	Descriptors []yamlDescriptor `json:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `json:"key"`
	Value          string           `json:"value"`
	RateLimit      *yamlRateLimit   `json:"rate_limit"`
	Descriptors    []yamlDescriptor `json:"descriptors"`
	ShadowMode     bool             `json:"shadow_mode"`
	DetailedMetric bool             `json:"detailed_metric"`
	ValueToMetric  bool             `json:"value_to_metric"`
	ShareThreshold bool             `json:"share_threshold"`
}

type yamlRateLimit struct {
	Unit            string `json:"unit"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unlimited       bool   `json:"unlimited"`
	Name            string `json:"name"`
	Replaces        []struct {
		Name string `json:"name"`
	} `json:"replaces"`
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
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return "", nil, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
	}
	if f.Domain == "" {
		return "", nil, fmt.Errorf("%w: %s: domain is required", ErrInvalid, name)
	}
	var walk func(prefix []Entry, ds []yamlDescriptor) error
	walk = func(prefix []Entry, ds []yamlDescriptor) error {
		seen := map[Entry]bool{}
		for _, d := range ds {
			if d.Key == "" {
				return fmt.Errorf("%w: %s: descriptor key must not be empty", ErrInvalid, name)
			}
			e := Entry{Key: d.Key, Value: d.Value}
			if seen[e] {
				return fmt.Errorf("%w: %s: duplicate descriptor %s=%s", ErrInvalid, name, d.Key, d.Value)
			}
			seen[e] = true
			path := append(slices.Clone(prefix), e)
			if rl := d.RateLimit; rl != nil {
				r := &Rule{Source: SourceFile, Name: rl.Name, Domain: f.Domain, Descriptors: path,
					Algorithm: FixedWindow, Unlimited: rl.Unlimited, Limit: rl.RequestsPerUnit}
				if d.ShadowMode {
					r.Mode = Shadow
				}
				r.ID = "file:" + f.Domain + ":" + r.path()
				for _, rp := range rl.Replaces {
					if rp.Name == "" {
						return fmt.Errorf("%w: %s: %s: replaces needs a name", ErrInvalid, name, r.path())
					}
					r.Replaces = append(r.Replaces, rp.Name)
				}
				if !rl.Unlimited {
					w, ok := units[strings.ToUpper(rl.Unit)]
					if !ok {
						return fmt.Errorf("%w: %s: %s: invalid rate limit unit %q", ErrInvalid, name, r.path(), rl.Unit)
					}
					r.Window = w
				}
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
		return "", nil, err
	}
	return f.Domain, rs, nil
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
