// Package deps is the guard behind `make deps`: it finds everything the
// repository's Makefile, scripts, README examples and Go code need from the
// machine, and checks that each is installed by make deps
// (e2e/scripts/deps.txt), built from a pinned Go module, part of Debian's
// required base, or explicitly optional.
//
// It exists because a tool a developer installed by hand makes `make test`
// pass on that machine and fail on every fresh one. Presence alone proves
// nothing there, so the guard asks dpkg which package put each tool and file
// on the machine, and accepts it only when that package is one deps.txt names,
// one of their dependencies (make deps installs without recommends), or part
// of the base every Debian system has. It also checks each deps.txt line
// against the package it names, so a wrong package name fails here and not
// on the next fresh machine.
//
// What it sees: commands in Makefile recipes (with make's variables
// expanded), in *.sh scripts and .ci/run, in README code blocks marked sh,
// bash or shell, and the constant names Go code passes to os/exec; the
// include directories of protoc and the imports of proto/ that resolve in
// them; `go tool` names (go.mod's tool directive) and `go install` targets
// (pinned to a version). Names computed at run time are not seen.
package deps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Use kinds.
const (
	UseCmd       = "cmd"        // a program run by name or absolute path
	UseFile      = "file"       // a file read from outside the repository
	UseGoTool    = "go tool"    // go tool NAME
	UseGoInstall = "go install" // go install or go run of PKG@VERSION
	UseInclude   = "include"    // a protoc include directory
)

// Use is one thing a file of the repository needs from the machine.
type Use struct {
	Kind  string
	Name  string
	Where string // path:line, relative to the root
}

// Problem is one thing a fresh machine would lack.
type Problem struct {
	Where string
	Msg   string
}

func (p Problem) String() string { return p.Where + ": " + p.Msg }

// Config says what to check.
type Config struct {
	Root     string // the repository
	Manifest string // default Root/e2e/scripts/deps.txt
}

// skipDirs are never scanned: VCS data, run state, build output, and the
// testdata of Go packages (fixtures, this package's own included).
var skipDirs = map[string]bool{".git": true, ".run": true, "bin": true, "node_modules": true, "vendor": true, "testdata": true}

// Scan returns every use the repository's files make of the machine.
func Scan(root string) ([]Use, error) {
	var uses []Use
	fset := token.NewFileSet()
	goDirs := map[string][]string{}
	rel := func(p string) string {
		if r, err := filepath.Rel(root, p); err == nil {
			return r
		}
		return p
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && skipDirs[name] {
				return filepath.SkipDir
			}
			return nil
		}
		var u []Use
		switch {
		case strings.HasSuffix(name, ".go"):
			goDirs[filepath.Dir(path)] = append(goDirs[filepath.Dir(path)], name)
			return nil
		case name == "Makefile" || strings.HasSuffix(name, ".mk"):
			u, err = fileUses(path, rel(path), makefileUses)
		case strings.HasSuffix(name, ".sh") || rel(path) == filepath.Join(".ci", "run"):
			u, err = fileUses(path, rel(path), func(src, file string) ([]Use, error) { return shellUses(src, file, 0) })
		case name == "README.md":
			u, err = fileUses(path, rel(path), markdownUses)
		}
		uses = append(uses, u...)
		return err
	})
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(goDirs))
	for d := range goDirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if !importsExec(fset, dir, goDirs[dir]) {
			continue
		}
		files, err := parseGoDir(fset, dir, goDirs[dir])
		if err != nil {
			return nil, err
		}
		uses = append(uses, goUses(fset, files, rel)...)
	}
	protoUses, err := protoImports(root, uses)
	if err != nil {
		return nil, err
	}
	return append(uses, protoUses...), nil
}

func fileUses(path, name string, scan func(src, file string) ([]Use, error)) ([]Use, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return scan(string(b), name)
}

func importsExec(fset *token.FileSet, dir string, names []string) bool {
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ImportsOnly)
		if err != nil {
			return true // let the full parse report it
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == `"os/exec"` {
				return true
			}
		}
	}
	return false
}

var protoImport = regexp.MustCompile(`(?m)^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;`)

// protoImports returns, for every import of the repository's .proto files
// that is not a file of the repository's own include directories, the file
// it resolves to in protoc's other include directories.
func protoImports(root string, uses []Use) ([]Use, error) {
	var local, system []string
	where := ""
	for _, u := range uses {
		if u.Kind != UseInclude {
			continue
		}
		if filepath.IsAbs(u.Name) {
			system = append(system, u.Name)
			where = u.Where
		} else {
			local = append(local, filepath.Join(root, u.Name))
		}
	}
	seen := map[string]bool{}
	var out []Use
	for _, dir := range local {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range protoImport.FindAllStringSubmatch(string(b), -1) {
				imp := m[1]
				if seen[imp] || exists(local, imp) {
					continue
				}
				seen[imp] = true
				target := filepath.Join(append(system, "/nonexistent")[0], imp)
				for _, s := range system {
					if _, err := os.Stat(filepath.Join(s, imp)); err == nil {
						target = filepath.Join(s, imp)
						break
					}
				}
				out = append(out, Use{Kind: UseFile, Name: target, Where: where + " (import of " + m[1] + ")"})
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return out, nil
}

func exists(dirs []string, name string) bool {
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return true
		}
	}
	return false
}

// Check scans the repository and returns what a fresh machine after
// `make deps` would lack. It needs a Debian machine (dpkg-query).
func Check(ctx context.Context, cfg Config) ([]Problem, error) {
	if cfg.Manifest == "" {
		cfg.Manifest = filepath.Join(cfg.Root, "e2e", "scripts", "deps.txt")
	}
	m, err := ReadManifest(cfg.Manifest)
	if err != nil {
		return nil, err
	}
	uses, err := Scan(cfg.Root)
	if err != nil {
		return nil, err
	}
	db, err := LoadDpkg(ctx)
	if err != nil {
		return nil, err
	}
	env, err := goEnv(ctx, cfg.Root)
	if err != nil {
		return nil, err
	}
	c := &checker{m: m, db: db, env: env, root: cfg.Root, manifestName: cfg.Manifest}
	if r, err := filepath.Rel(cfg.Root, cfg.Manifest); err == nil && !strings.HasPrefix(r, "..") {
		c.manifestName = r
	}
	return c.run(ctx, uses)
}

type goEnvironment struct {
	GOROOT string
	Tools  []string // go.mod's tool directive
}

func goEnv(ctx context.Context, root string) (goEnvironment, error) {
	var env goEnvironment
	out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return env, fmt.Errorf("deps: go env GOROOT: %w", err)
	}
	env.GOROOT = strings.TrimSpace(string(out))
	cmd := exec.CommandContext(ctx, "go", "mod", "edit", "-json")
	cmd.Dir = root
	out, err = cmd.Output()
	if err != nil {
		return env, fmt.Errorf("deps: go mod edit -json: %w", err)
	}
	var mod struct{ Tool []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		return env, fmt.Errorf("deps: go mod edit -json: %w", err)
	}
	for _, t := range mod.Tool {
		env.Tools = append(env.Tools, t.Path)
	}
	return env, nil
}

type checker struct {
	m            *Manifest
	db           *Dpkg
	env          goEnvironment
	root         string
	manifestName string
	problems     []Problem
}

func (c *checker) problem(where, format string, args ...any) {
	c.problems = append(c.problems, Problem{Where: where, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) run(ctx context.Context, uses []Use) ([]Problem, error) {
	// Where each requirement and each command or file use is on this machine.
	reqPath := map[int]string{}
	usePath := map[int]string{}
	var paths []string
	for i, r := range c.m.Requirements {
		if p := resolve(r.Kind, r.What); p != "" {
			reqPath[i] = p
			paths = append(paths, p)
		}
	}
	for i, u := range uses {
		if u.Kind == UseCmd || u.Kind == UseFile {
			if p := resolve(u.Kind, u.Name); p != "" {
				usePath[i] = p
				paths = append(paths, p)
			}
		}
	}
	owners, err := Owners(ctx, paths)
	if err != nil {
		return nil, err
	}
	allowed := c.db.Closure(append(c.db.Base(), c.m.Packages()...)...)

	for i, r := range c.m.Requirements {
		where := fmt.Sprintf("%s:%d", c.manifestName, r.Line)
		p, found := reqPath[i]
		switch {
		case r.Kind == KindOptional:
		case r.Kind == KindGoInstall:
			if !goInstalled(uses, r.What) {
				c.problem(where, "no Makefile target builds %s with go install of a pinned module", r.What)
			}
		case !found && r.Kind == KindMachine:
			c.problem(where, "%s is missing: the machine must have it before make deps can run", r.What)
		case !found:
			c.problem(where, "%s is missing: `make deps` installs it from %s (run it, or fix the package name)", r.What, r.Package)
		case r.Installed() && !c.db.Installed(r.Package):
			c.checkOwner(where, r.What, p, owners[p], nil,
				fmt.Sprintf("but %s is not installed: this machine got it another way, and a fresh one that installs %s may not: name the package that provides it", r.Package, r.Package))
		case r.Installed():
			c.checkOwner(where, r.What, p, owners[p], c.db.Closure(r.Package),
				fmt.Sprintf("which %s does not bring in when installed without recommends: name the package that does", r.Package))
		}
	}

	for i, u := range uses {
		switch u.Kind {
		case UseCmd, UseFile:
			c.checkUse(u, usePath[i], owners[usePath[i]], allowed)
		case UseGoTool:
			if !c.hasTool(u.Name) {
				c.problem(u.Where, "go tool %s is not in go.mod's tool directive: add it with `go get -tool` so its version is pinned", u.Name)
			}
		case UseGoInstall:
			_, v, _ := strings.Cut(u.Name, "@")
			if !pinned(v) {
				c.problem(u.Where, "%s is not pinned to a version: name one (…@vX.Y.Z) so every machine builds the same tool", u.Name)
			}
		}
	}
	sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].Where < c.problems[j].Where })
	return slices.Compact(c.problems), nil
}

// checkUse accepts a command or file when deps.txt marks it optional or the
// machine's own, when it lives in the repository or in Go's own tree, or when
// a package of make deps or of Debian's base put it there.
func (c *checker) checkUse(u Use, path string, owners []string, allowed map[string]bool) {
	if r, ok := c.m.Find(u.Name); ok && !r.Installed() {
		return // not apt's: checked above, or optional
	}
	what := u.Name
	if u.Kind == UseCmd {
		what = "runs " + u.Name
	} else {
		what = "reads " + u.Name
	}
	if path == "" {
		if _, listed := c.m.Find(u.Name); !listed {
			c.problem(u.Where, "%s, which this machine lacks and %s does not list: add it there (or mark it optional)", what, c.manifestName)
		}
		return
	}
	if within(path, c.root) || within(path, c.env.GOROOT) {
		return
	}
	c.checkOwner(u.Where, what, path, owners, allowed,
		fmt.Sprintf("which neither %s nor Debian's base installs: add it to %s", c.manifestName, c.manifestName))
}

func (c *checker) checkOwner(where, what, path string, owners []string, allowed map[string]bool, notAllowed string) {
	if !strings.HasSuffix(what, path) {
		what += " (" + path + ")"
	}
	if len(owners) == 0 {
		c.problem(where, "%s, which no Debian package installed: installed by hand, so a fresh machine lacks it; list it in %s with its package", what, c.manifestName)
		return
	}
	for _, o := range owners {
		if allowed[o] {
			return
		}
	}
	c.problem(where, "%s from package %s, %s", what, strings.Join(owners, ", "), notAllowed)
}

func (c *checker) hasTool(name string) bool {
	for _, t := range c.env.Tools {
		if t == name || strings.HasSuffix(t, "/"+name) {
			return true
		}
	}
	return false
}

// goInstalled reports whether a go install use builds the named command.
func goInstalled(uses []Use, name string) bool {
	for _, u := range uses {
		pkg, _, _ := strings.Cut(u.Name, "@")
		if u.Kind == UseGoInstall && path.Base(pkg) == name {
			return true
		}
	}
	return false
}

func pinned(v string) bool {
	switch v {
	case "", "latest", "upgrade", "patch", "master", "main", "HEAD":
		return false
	}
	return true
}

// resolve returns where a command or file is on this machine, or "".
func resolve(kind, what string) string {
	switch kind {
	case KindCmd, KindMachine, KindOptional:
		if strings.HasPrefix(what, "/") {
			if st, err := os.Stat(what); err == nil && !st.IsDir() {
				return what
			}
			return ""
		}
		p, err := exec.LookPath(what)
		if err != nil {
			return ""
		}
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	case KindPGBin:
		matches, _ := filepath.Glob(filepath.Join("/usr/lib/postgresql/*/bin", what))
		sort.Strings(matches)
		if len(matches) == 0 {
			return ""
		}
		return matches[len(matches)-1]
	case KindFile:
		if _, err := os.Stat(what); err == nil {
			return what
		}
	}
	return ""
}

func within(path, dir string) bool {
	if dir == "" {
		return false
	}
	r, err := filepath.Rel(dir, path)
	return err == nil && r != ".." && !strings.HasPrefix(r, "../")
}
