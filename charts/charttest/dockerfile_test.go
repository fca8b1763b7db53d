package charttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	Cmd  string // upper-case: FROM, RUN, ...
	Args string
	Line int
}

// stage is one FROM and what follows it.
type stage struct {
	Base, Name string
	Body       []instruction
}

func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ins []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		ins = append(ins, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		cur.Reset()
	}
	var stages []stage
	for _, in := range ins {
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := stage{Base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].Body = append(stages[len(stages)-1].Body, in)
		}
	}
	return stages
}

// TestDockerfile checks the image build without a Docker engine: a
// multi-stage build of static binaries (CGO_ENABLED=0, -trimpath, module
// and build caches), every */cmd/* binary built into the directory the
// chart runs them from, and a non-root distroless or scratch final stage.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("%d stages: want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.Base, "golang:") || build.Name == "" {
		t.Errorf("first stage %q AS %q: want a named golang builder", build.Base, build.Name)
	}

	// The builder: CGO off, trimmed paths, cached modules, every binary.
	var cgoOff, trim, modCache, buildCache bool
	var outDir string
	var targets []string
	for _, in := range build.Body {
		if in.Cmd == "ENV" && strings.Contains(in.Args, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if in.Cmd != "RUN" {
			continue
		}
		modCache = modCache || strings.Contains(in.Args, "--mount=type=cache,target=/go/pkg/mod")
		_, goBuild, ok := strings.Cut(in.Args, "go build ")
		if !ok {
			continue
		}
		buildCache = buildCache || strings.Contains(in.Args, "--mount=type=cache,target=/root/.cache/go-build")
		cgoOff = cgoOff || strings.Contains(in.Args, "CGO_ENABLED=0 go build")
		f := strings.Fields(goBuild)
		for i, a := range f {
			switch {
			case a == "-trimpath":
				trim = true
			case a == "-o" && i+1 < len(f):
				outDir = f[i+1]
			case strings.HasPrefix(a, "./"):
				targets = append(targets, a)
			}
		}
	}
	if !cgoOff {
		t.Error("the builder must set CGO_ENABLED=0 (static binaries for a libc-less image)")
	}
	if !trim {
		t.Error("go build needs -trimpath")
	}
	if !modCache || !buildCache {
		t.Errorf("cache mounts: module cache %v, build cache %v", modCache, buildCache)
	}
	if !strings.HasSuffix(outDir, "/") {
		t.Errorf("go build -o %q: want a directory, one binary per command", outDir)
	}

	// Every */cmd/* of the repository matches a build target (globs as the
	// shell expands them in the build stage, whose WORKDIR is the module).
	cmds, err := filepath.Glob(filepath.Join(root, "*", "cmd", "*"))
	if err != nil || len(cmds) == 0 {
		t.Fatalf("no */cmd/* found: %v", err)
	}
	built := map[string]bool{}
	var trees []string // targets ending in /...: every package below
	for _, pattern := range targets {
		base, tree := strings.CutSuffix(pattern, "/...")
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(base)))
		if err != nil {
			t.Errorf("build target %q: %v", pattern, err)
		}
		for _, p := range m {
			built[p] = true
			if tree {
				trees = append(trees, p+string(filepath.Separator))
			}
		}
	}
	for _, c := range cmds {
		below := slices.ContainsFunc(trees, func(tr string) bool { return strings.HasPrefix(c, tr) })
		if !built[c] && !below {
			rel, _ := filepath.Rel(root, c)
			t.Errorf("%s is not built by the Dockerfile (targets %v)", rel, targets)
		}
	}

	// The final stage: distroless/static or scratch, non-root, binaries
	// copied from the builder into the chart's binDir.
	nonrootBase := strings.HasPrefix(final.Base, "gcr.io/distroless/static") && strings.HasSuffix(final.Base, ":nonroot")
	if !nonrootBase && final.Base != "scratch" {
		t.Errorf("final base %q: want gcr.io/distroless/static...:nonroot or scratch", final.Base)
	}
	user := ""
	copied := false
	for _, in := range final.Body {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "COPY":
			f := strings.Fields(in.Args)
			if len(f) == 3 && f[0] == "--from="+build.Name && f[1] == outDir && strings.TrimSuffix(f[2], "/")+"/" == binDir {
				copied = true
			}
		case "RUN":
			t.Errorf("line %d: RUN in the final stage (no shell there)", in.Line)
		}
	}
	if !copied {
		t.Errorf("final stage must COPY --from=%s %s %s", build.Name, outDir, binDir)
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("final USER %q: must be a non-root user", user)
	}
}

// TestDockerignoreKeepsTheSources walks the module and checks that no Go
// source, go.mod/go.sum or embedded file (*.sql, *.lua) is excluded from
// the build context.
func TestDockerignoreKeepsTheSources(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "!") {
			patterns = append(patterns, l)
		}
	}
	for _, must := range []string{".git", ".run", "bin"} {
		if !slices.Contains(patterns, must) {
			t.Errorf(".dockerignore must exclude %s", must)
		}
	}
	needed := []string{".go", ".sql", ".lua"}
	checked := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == ".run" {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(needed, filepath.Ext(rel)) && rel != "go.mod" && rel != "go.sum" {
			return nil
		}
		if strings.HasPrefix(rel, "charts/") || strings.HasSuffix(rel, "_test.go") || strings.Contains(rel, "/testdata/") {
			return nil // not part of any binary
		}
		checked++
		for _, pat := range patterns {
			if ignored(pat, rel) {
				t.Errorf("%s is excluded from the build context by %q", rel, pat)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}

// ignored approximates Docker's matcher for the pattern forms we use: a
// path (or its parent directories) matching the pattern, and **/ prefixes.
func ignored(pattern, rel string) bool {
	if p, ok := strings.CutPrefix(pattern, "**/"); ok {
		ok, _ := filepath.Match(p, filepath.Base(rel))
		return ok
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		if ok, _ := filepath.Match(pattern, strings.Join(parts[:i+1], "/")); ok {
			return true
		}
	}
	return false
}
