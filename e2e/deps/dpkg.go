package deps

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Dpkg is a snapshot of a Debian machine's installed packages.
type Dpkg struct {
	installed map[string]*debPackage
	providers map[string][]string // virtual package -> installed packages providing it
}

type debPackage struct {
	name string
	// base: Essential or Priority required, which every Debian system has
	// (debootstrap's minbase); nothing needs to install these.
	base bool
	// deps: Pre-Depends and Depends, each a list of alternatives.
	deps [][]string
}

// LoadDpkg reads the installed-package database with dpkg-query.
func LoadDpkg(ctx context.Context) (*Dpkg, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W",
		"-f=${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t${Pre-Depends}\t${Depends}\t${Provides}\n").Output()
	if err != nil {
		return nil, fmt.Errorf("deps: dpkg-query -W: %w", err)
	}
	return parseDpkg(out), nil
}

func parseDpkg(out []byte) *Dpkg {
	d := &Dpkg{installed: map[string]*debPackage{}, providers: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 7 || f[1] != "installed" {
			continue
		}
		p := &debPackage{name: f[0], base: f[2] == "yes" || f[3] == "required"}
		for _, rel := range []string{f[4], f[5]} {
			p.deps = append(p.deps, parseRelations(rel)...)
		}
		d.installed[p.name] = p
		for _, alts := range parseRelations(f[6]) {
			for _, v := range alts {
				d.providers[v] = append(d.providers[v], p.name)
			}
		}
	}
	return d
}

// parseRelations parses a Depends-style field: "a (>= 1) | b:any, c".
func parseRelations(field string) [][]string {
	var out [][]string
	for _, group := range strings.Split(field, ",") {
		var alts []string
		for _, alt := range strings.Split(group, "|") {
			alt = strings.TrimSpace(alt)
			if i := strings.IndexAny(alt, " ("); i >= 0 {
				alt = alt[:i]
			}
			if i := strings.IndexByte(alt, ':'); i >= 0 {
				alt = alt[:i]
			}
			if alt != "" {
				alts = append(alts, alt)
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// Installed reports whether a package is installed.
func (d *Dpkg) Installed(name string) bool { return d.installed[name] != nil }

// Base returns the installed packages every Debian system has.
func (d *Dpkg) Base() []string {
	var out []string
	for name, p := range d.installed {
		if p.base {
			out = append(out, name)
		}
	}
	return out
}

// Closure returns roots and every installed package they depend on,
// transitively (Pre-Depends and Depends; not Recommends, which make deps
// does not install). Of a dependency's alternatives, every installed one is
// taken, and a virtual package stands for its installed providers.
func (d *Dpkg) Closure(roots ...string) map[string]bool {
	seen := map[string]bool{}
	queue := append([]string(nil), roots...)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		p := d.installed[name]
		if p == nil {
			continue
		}
		for _, alts := range p.deps {
			for _, a := range alts {
				if d.installed[a] != nil {
					queue = append(queue, a)
				}
				queue = append(queue, d.providers[a]...)
			}
		}
	}
	return seen
}

// Owners returns the packages that installed each path. Paths no package
// owns are absent from the result. Links are followed, and both spellings of
// a merged-/usr path are asked, since dpkg records the one the package
// shipped (/bin/bash on Debian 12, /usr/bin/bash later).
func Owners(ctx context.Context, paths []string) (map[string][]string, error) {
	ask := map[string][]string{} // spelling asked -> original paths
	for _, p := range paths {
		for _, c := range spellings(p) {
			ask[c] = append(ask[c], p)
		}
	}
	if len(ask) == 0 {
		return map[string][]string{}, nil
	}
	args := []string{"-S"}
	for c := range ask {
		args = append(args, c)
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", args...).Output()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, fmt.Errorf("deps: dpkg-query -S: %w", err) // exit 1 only means some path has no owner
	}
	owners := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "diversion by ") {
			continue
		}
		pkgs, path, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		for _, orig := range ask[path] {
			for _, p := range strings.Split(pkgs, ", ") {
				p, _, _ = strings.Cut(p, ":")
				owners[orig] = appendNew(owners[orig], p)
			}
		}
	}
	return owners, nil
}

// spellings returns p, the file it links to, and their merged-/usr twins.
func spellings(p string) []string {
	out := []string{p}
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		out = append(out, r)
	}
	for _, s := range append([]string(nil), out...) {
		for _, dir := range []string{"/bin/", "/sbin/", "/lib/", "/lib64/"} {
			if rest, ok := strings.CutPrefix(s, "/usr"+dir); ok {
				out = append(out, dir+rest)
			} else if rest, ok := strings.CutPrefix(s, dir); ok {
				out = append(out, "/usr"+dir+rest)
			}
		}
	}
	return out
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
