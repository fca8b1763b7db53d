package deps

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Requirement kinds of deps.txt.
const (
	KindCmd      = "cmd"      // a command on PATH, installed from Package
	KindPGBin    = "pgbin"    // a PostgreSQL server program, installed from Package
	KindFile     = "file"     // an absolute path, installed from Package
	KindMachine  = "machine"  // present on the starting machine, never installed
	KindOptional = "optional" // never installed; its users skip or fall back
	// KindGoInstall is built by a Makefile target with go install of a
	// pinned module (into .run/bin, not on PATH).
	KindGoInstall = "goinstall"
)

// Requirement is one line of deps.txt.
type Requirement struct {
	Kind    string
	What    string // command name or absolute path
	Package string // Debian package; "-" for machine and optional
	UsedBy  string
	Line    int
}

// Installed reports whether make deps installs this requirement.
func (r Requirement) Installed() bool {
	return r.Kind == KindCmd || r.Kind == KindPGBin || r.Kind == KindFile
}

// Manifest is deps.txt: what make deps makes sure a machine has.
type Manifest struct {
	Path         string
	Requirements []Requirement
}

// ReadManifest parses deps.txt. Unknown kinds, a missing package on a kind
// that installs one, or a relative file path are errors.
func ReadManifest(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &Manifest{Path: path}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"kind what package [used-by]\", got %q", path, n, line)
		}
		r := Requirement{Kind: fields[0], What: fields[1], Package: fields[2], UsedBy: strings.Join(fields[3:], " "), Line: n}
		switch r.Kind {
		case KindCmd, KindPGBin, KindFile:
			if r.Package == "-" {
				return nil, fmt.Errorf("%s:%d: %s %s names no Debian package", path, n, r.Kind, r.What)
			}
		case KindMachine, KindOptional, KindGoInstall:
		default:
			return nil, fmt.Errorf("%s:%d: unknown kind %q", path, n, r.Kind)
		}
		if r.Kind == KindFile && !strings.HasPrefix(r.What, "/") {
			return nil, fmt.Errorf("%s:%d: file %q is not an absolute path", path, n, r.What)
		}
		m.Requirements = append(m.Requirements, r)
	}
	return m, sc.Err()
}

// Packages returns the Debian packages make deps installs.
func (m *Manifest) Packages() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m.Requirements {
		if r.Installed() && !seen[r.Package] {
			seen[r.Package] = true
			out = append(out, r.Package)
		}
	}
	return out
}

// Find returns the requirement for a command name or path, if any.
func (m *Manifest) Find(what string) (Requirement, bool) {
	for _, r := range m.Requirements {
		if r.What == what {
			return r, true
		}
	}
	return Requirement{}, false
}
