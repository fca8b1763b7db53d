package deps

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../.."

// needDebian fails the test under CI and skips it elsewhere when this is not
// a Debian machine: the guard asks dpkg who installed what.
func needDebian(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("dpkg-query not found: the guard needs a Debian machine")
		}
		t.Skip("dpkg-query not found: the guard needs a Debian machine")
	}
}

func check(t *testing.T, cfg Config) []Problem {
	t.Helper()
	needDebian(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	problems, err := Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// TestMakeDepsCoversWhatIsUsed is the guard: everything the repository runs
// or reads from the machine is installed by make deps, pinned, Debian's base
// or optional. It runs after make deps, first in make test.
func TestMakeDepsCoversWhatIsUsed(t *testing.T) {
	for _, p := range check(t, Config{Root: repoRoot}) {
		t.Error(p)
	}
}

// manifestWith writes a copy of the repository's deps.txt with edit applied
// to it and returns its path.
func manifestWith(t *testing.T, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "e2e", "scripts", "deps.txt"))
	if err != nil {
		t.Fatal(err)
	}
	edited := edit(string(b))
	if edited == string(b) {
		t.Fatal("the edit changed nothing: deps.txt no longer has what this test removes")
	}
	p := filepath.Join(t.TempDir(), "deps.txt")
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func dropLine(containing string) func(string) string {
	return func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, containing) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
}

func wantProblem(t *testing.T, problems []Problem, where string, substrs ...string) {
	t.Helper()
	for _, p := range problems {
		if !strings.Contains(p.Where, where) {
			continue
		}
		ok := true
		for _, s := range substrs {
			ok = ok && strings.Contains(p.Msg, s)
		}
		if ok {
			return
		}
	}
	t.Errorf("no problem at %s mentioning %q; got:\n%s", where, substrs, problemList(problems))
}

func problemList(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

const wellKnown = "/usr/include/google/protobuf/timestamp.proto"

// needWellKnownTypes: the tests below reason about which package put the
// well-known .proto files on this machine, so they must be there.
func needWellKnownTypes(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(wellKnown); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing after make deps: %v", wellKnown, err)
		}
		t.Skipf("%s missing: run make deps", wellKnown)
	}
}

// The failure this guard was built for: protoc -I /usr/include read the
// well-known types from libprotobuf-dev, which a developer had installed by
// hand and make deps did not install.
func TestGuardCatchesTheWellKnownTypesNotInstalledByMakeDeps(t *testing.T) {
	needWellKnownTypes(t)
	problems := check(t, Config{Root: repoRoot, Manifest: manifestWith(t, dropLine("libprotobuf-dev"))})
	wantProblem(t, problems, "Makefile:", "google/protobuf/timestamp.proto", "libprotobuf-dev", "neither")
	wantProblem(t, problems, "Makefile:", "google/protobuf/duration.proto", "libprotobuf-dev")
}

// A deps.txt line whose package does not provide what it names fails here,
// not on the next fresh machine: protobuf-compiler only recommends
// libprotobuf-dev, and make deps installs without recommends.
func TestGuardCatchesAPackageThatDoesNotProvideItsLine(t *testing.T) {
	needWellKnownTypes(t)
	m := manifestWith(t, func(s string) string {
		return strings.Replace(s, "libprotobuf-dev    make proto", "protobuf-compiler  make proto", 1)
	})
	wantProblem(t, check(t, Config{Root: repoRoot, Manifest: m}), "deps.txt:", "timestamp.proto", "libprotobuf-dev", "protobuf-compiler does not bring in")
}

// jq is on many machines (this kind's image has it), not in Debian's base.
func TestGuardCatchesAToolWithNoLine(t *testing.T) {
	needDebian(t)
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("jq: %v (make deps installs it)", err)
	}
	problems := check(t, Config{Root: repoRoot, Manifest: manifestWith(t, dropLine(" jq "))})
	wantProblem(t, problems, "README.md:", "runs jq", "from package jq", "neither")
}

// The fixture uses, once each, every pattern the scanners recognise.
func TestGuardOnFixture(t *testing.T) {
	root := filepath.Join("testdata", "fixture")
	cfg := Config{Root: root, Manifest: filepath.Join(root, "deps.txt")}
	problems := check(t, cfg)
	for _, want := range []struct{ where, what string }{
		{"Makefile:5", "runs portico-fixture-tool, which this machine lacks"},
		{"Makefile:5", "runs jq"},
		{"Makefile:6", "example.com/cmd/thing@latest is not pinned"},
		{"Makefile:7", "go tool not-a-tool is not in go.mod's tool directive"},
		{"run.sh:6", "runs portico-fixture-runuser, which this machine lacks"},
		{"README.md:4", "runs portico-fixture-readme, which this machine lacks"},
		{"tool.go:11", "runs portico-fixture-wrapped, which this machine lacks"},
		{"tool.go:13", "runs portico-fixture-ranged, which this machine lacks"},
		{"tool.go:15", "runs portico-fixture-go, which this machine lacks"},
	} {
		wantProblem(t, problems, want.where, want.what)
	}
	if len(problems) != 9 {
		t.Errorf("want 9 problems, got %d:\n%s", len(problems), problemList(problems))
	}

	// The same tool, now on PATH but put there by hand.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "portico-fixture-tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	wantProblem(t, check(t, cfg), "Makefile:5", "portico-fixture-tool", "no Debian package installed")
}

func TestShellUses(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   []string
	}{
		{"ls -l | sort && tail -n1 x", []string{"cmd ls", "cmd sort", "cmd tail"}},
		{"f() { redis-cli ping; }; f", []string{"cmd redis-cli"}},
		{"x=$(psql -c 'select 1')", []string{"cmd psql"}},
		{"command -v protoc >/dev/null || apt-get install protoc", []string{"cmd apt-get"}},
		{"if command -v lint; then lint run; fi", []string{"cmd lint"}},
		{"exec env A=1 B=2 timeout -s KILL 5s curl x", []string{"cmd curl"}},
		{"runuser -u postgres -- initdb -D x", []string{"cmd initdb"}},
		{`"$bin/initdb" -D x; ./script.sh; bin/launch`, nil},
		{"/usr/sbin/nginx -t", []string{"cmd /usr/sbin/nginx"}},
		{"echo hi; cd /; set -e; printf x; read -r y; exit 0", nil},
		{"'jq' -r .; \"curl\" x", []string{"cmd jq", "cmd curl"}},
		{"go tool -n protoc-gen-go; go install a.b/c@v1.2.3 ./local; go run x@latest", []string{"cmd go", "go tool protoc-gen-go", "cmd go", "go install a.b/c@v1.2.3", "cmd go", "go install x@latest"}},
		{"protoc -I proto -I/usr/include --proto_path=third --proto_path other x.proto", []string{"cmd protoc", "include proto", "include /usr/include", "include third", "include other"}},
	} {
		uses, err := shellUses(tc.script, "t.sh", 0)
		if err != nil {
			t.Fatalf("%q: %v", tc.script, err)
		}
		var got []string
		for _, u := range uses {
			got = append(got, u.Kind+" "+u.Name)
		}
		sort.Strings(got)
		want := append([]string(nil), tc.want...)
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Errorf("%q: got %q, want %q", tc.script, got, want)
		}
	}
	if _, err := shellUses("if then fi (", "bad.sh", 0); err == nil {
		t.Error("a script that does not parse is an error, not a script without uses")
	}
}

func TestExpandMake(t *testing.T) {
	vars := map[string]string{"GO": "go", "BIN": "bin", "PEER": "x.y/cmd@$(V)", "V": "v1"}
	for in, want := range map[string]string{
		"$(GO) install $(PEER)":          "go install x.y/cmd@v1",
		"GOBIN=$(dir $@) $(GO) build":    "GOBIN=__make__ go build",
		"out=$$($(GO) tool -n x); $$out": "out=$(go tool -n x); $out",
		"${BIN}/launch $(CURDIR) $<":     "bin/launch __make__ __make__",
		"echo $$":                        "echo $",
	} {
		if got := expandMake(in, vars, 0); got != want {
			t.Errorf("expandMake(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMakefileUsesLineNumbersAndContinuations(t *testing.T) {
	src := "X := jq\n\nall:\n\t@echo a; \\\n\t  curl x\n\t-$(X) .\n"
	uses, err := makefileUses(src, "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range uses {
		got = append(got, u.Name+"@"+u.Where)
	}
	want := []string{"curl@Makefile:5", "jq@Makefile:6"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestClosure(t *testing.T) {
	out := strings.Join([]string{
		"bash\tinstalled\tyes\trequired\t\tbase-files (>= 1)\t",
		"base-files\tinstalled\tno\trequired\t\t\t",
		"protobuf-compiler\tinstalled\tno\toptional\t\tlibprotoc32 (= 3), libc6:any (>= 2)\t",
		"libprotoc32\tinstalled\tno\toptional\t\tlibprotobuf32 | libprotobuf-lite32\t",
		"libprotobuf32\tinstalled\tno\toptional\t\t\t",
		"libprotobuf-dev\tinstalled\tno\toptional\t\tlibprotobuf32\t",
		"mawk\tinstalled\tno\trequired\t\t\tawk",
		"tool\tinstalled\tno\toptional\t\tawk\t",
		"removed\tconfig-files\tno\toptional\t\t\t",
	}, "\n")
	d := parseDpkg([]byte(out))
	if d.Installed("removed") {
		t.Error("a package with only its config files left counts as installed")
	}
	keys := func(m map[string]bool) []string {
		var s []string
		for k := range m {
			s = append(s, k)
		}
		sort.Strings(s)
		return s
	}
	if got, want := keys(d.Closure("protobuf-compiler")), []string{"libprotobuf32", "libprotoc32", "protobuf-compiler"}; !reflect.DeepEqual(got, want) {
		t.Errorf("closure(protobuf-compiler) = %q, want %q (no libprotobuf-dev: nothing depends on it)", got, want)
	}
	if got, want := keys(d.Closure("tool")), []string{"mawk", "tool"}; !reflect.DeepEqual(got, want) {
		t.Errorf("closure(tool) = %q, want %q (the virtual awk is mawk)", got, want)
	}
	base := d.Base()
	sort.Strings(base)
	if want := []string{"base-files", "bash", "mawk"}; !reflect.DeepEqual(base, want) {
		t.Errorf("Base() = %q, want %q", base, want)
	}
}

func TestReadManifestRejects(t *testing.T) {
	for _, bad := range []string{
		"cmd jq\n",                        // no package
		"cmd jq -\n",                      // installs nothing
		"file include/x.proto libx-dev\n", // relative
		"sometimes jq jq\n",               // unknown kind
		"pgbin initdb - the private pg\n", // installs nothing
	} {
		p := filepath.Join(t.TempDir(), "deps.txt")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(p); err == nil {
			t.Errorf("ReadManifest accepted %q", bad)
		}
	}
}
