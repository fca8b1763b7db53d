package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README examples are run against make run as written, so a broken
// example fails make test instead of the reader who copies it.
//
// Which examples run: every code block fenced ```sh, ```bash or ```shell
// in readmes, unless the line before its fence (blank lines aside) is an
// HTML comment <!-- not-run: reason -->, which the reader does not see and
// the test logs. Plain ``` blocks are illustrations (command synopses,
// diagrams) and never run; ```sh says "paste this into a shell next to
// make run".
//
// How: the blocks run in README order, each in one bash (pipefail, aliases
// expanded) started in the run's root, where bin/ and .run/ are what make
// run leaves in a checkout. A block's commands run one at a time in that
// shell, so a variable one sets (KEY=$(…)) is there for the next (but not
// for another block); a command
// is one or more lines, up to the first point where bash finds it
// complete (a trailing \, an open quote or a for … done continue it).
// Lines holding only a comment are notes to the reader.
//
// What is checked: when the comment after a command starts with an HTTP
// status ("# 401: no credentials", "# 000: refused" for no response), the
// status the command prints (curl -i's status line, or a code from
// -w '%{http_code}' ending its output) must be that one, whatever the exit
// status; otherwise the command must exit 0. A block stops at its first
// failure. Commands that talk to Envoy (envoyPort) run only when make run
// started one. The programs they run from bin/ are built beside the
// launcher's.
//
// Not listed: ratelimitsvc/README.md (its sh block is the peer benchmark's
// recipe, not an example against make run) and charts/portico/README.md
// (Kubernetes).
var readmes = []string{"README.md", "scheduler/README.md", "kvnode/README.md", "cachenode/README.md"}

// exampleTimeout bounds one command: the examples are single requests.
const exampleTimeout = 30 * time.Second

var (
	shFence      = regexp.MustCompile("^(\\s*)```(sh|bash|shell)\\s*$")
	notRunMarker = regexp.MustCompile(`^<!--\s*not-run:(.*)-->$`)
	// statusComment is a comment that promises an HTTP status.
	statusComment = regexp.MustCompile(`^(000|[1-5][0-9][0-9])\b`)
	// envoyPort matches an address or redis-cli port of make run's Envoy:
	// ingress :10000, HTTPS :10443, admin :9901, stats :19001, redis :6380.
	envoyPort = regexp.MustCompile(`(?:(?:localhost|127\.0\.0\.1):|\s-p\s*)(?:10000|10443|9901|19001|6380)\b`)
	// binRun is a program an example runs from bin/.
	binRun = regexp.MustCompile(`(?:^|[\s;|&(])bin/([A-Za-z0-9_-]+)`)
	// httpStatusLine is curl -i's status line.
	httpStatusLine = regexp.MustCompile(`(?m)^HTTP/[0-9.]+ ([0-9]{3})\b`)
	threeDigits    = regexp.MustCompile(`^[0-9]{3}$`)
)

// example is one command of a README block.
type example struct {
	File string
	Line int // the command's first line in File
	Cmd  string
	// Status is the HTTP status the command's comment promises ("" when
	// it promises none, and the command must exit 0).
	Status     string
	NeedsEnvoy bool
}

func (e example) where() string { return fmt.Sprintf("%s:%d", e.File, e.Line) }

// block is one ```sh block.
type block struct {
	File     string
	Line     int    // the opening fence
	NotRun   string // the reason of a not-run marker
	Examples []example
}

// parseExamples returns the shell blocks of a Markdown file with their
// commands. It needs bash, which decides where a command ends.
func parseExamples(file, src string) ([]block, error) {
	lines := strings.Split(src, "\n")
	var blocks []block
	for i := 0; i < len(lines); i++ {
		m := shFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{File: file, Line: i + 1}
		for j := i - 1; j >= 0; j-- {
			prev := strings.TrimSpace(lines[j])
			if prev == "" {
				continue
			}
			if mm := notRunMarker.FindStringSubmatch(prev); mm != nil {
				if b.NotRun = strings.TrimSpace(mm[1]); b.NotRun == "" {
					return nil, fmt.Errorf("%s:%d: a not-run marker needs a reason", file, j+1)
				}
			}
			break
		}
		var cmd []string
		cmdLine := 0
		for i++; ; i++ {
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: the block is not closed", file, b.Line)
			}
			line := strings.TrimPrefix(lines[i], m[1])
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				break
			}
			if len(cmd) == 0 {
				if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
					continue // a note to the reader
				}
				cmdLine = i + 1
			}
			cmd = append(cmd, line)
			text := strings.Join(cmd, "\n")
			if !shellComplete(text) {
				continue
			}
			ex := example{File: file, Line: cmdLine, Cmd: text, NeedsEnvoy: envoyPort.MatchString(text)}
			if c := trailingComment(text); c != "" {
				ex.Status = statusComment.FindString(c)
			}
			b.Examples = append(b.Examples, ex)
			cmd = nil
		}
		if len(cmd) > 0 {
			return nil, fmt.Errorf("%s:%d: the command does not end before the block does:\n%s", file, cmdLine, strings.Join(cmd, "\n"))
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// shellComplete reports whether bash reads text as whole commands (no open
// quote, substitution, loop or line continuation).
func shellComplete(text string) bool {
	if strings.HasSuffix(text, `\`) {
		return false
	}
	return exec.Command("bash", "-n", "-c", text).Run() == nil
}

// trailingComment returns the comment ending cmd's last line, without the
// #: the first " #" there whose left side bash reads as complete (a # in
// quotes or in $(…) leaves it open).
func trailingComment(cmd string) string {
	last := strings.LastIndexByte(cmd, '\n') + 1
	for i := last; i < len(cmd); i++ {
		if cmd[i] != '#' || (i > last && cmd[i-1] != ' ' && cmd[i-1] != '\t') {
			continue
		}
		if left := strings.TrimSpace(cmd[:i]); left != "" && shellComplete(left) {
			return strings.TrimSpace(cmd[i+1:])
		}
	}
	return ""
}

// printedStatus is the HTTP status a command printed: curl -i's first
// final status line, or else a three-digit code ending the output (curl
// -w '%{http_code}').
func printedStatus(out string) (string, bool) {
	for _, m := range httpStatusLine.FindAllStringSubmatch(out, -1) {
		if !strings.HasPrefix(m[1], "1") {
			return m[1], true
		}
	}
	if f := strings.Fields(out); len(f) > 0 && threeDigits.MatchString(f[len(f)-1]) {
		return f[len(f)-1], true
	}
	return "", false
}

// verdict says whether a command did what its README line promises.
func verdict(e example, exit int, out string) error {
	if e.Status == "" {
		if exit != 0 {
			return fmt.Errorf("exit status %d", exit)
		}
		return nil
	}
	got, ok := printedStatus(out)
	switch {
	case !ok:
		return fmt.Errorf("the comment promises HTTP %s, but the command prints no status (use curl -i or -w '%%{http_code}')", e.Status)
	case got != e.Status:
		return fmt.Errorf("HTTP %s, the comment promises %s", got, e.Status)
	}
	return nil
}

// outcome is what became of one example.
type outcome struct {
	Example example
	// Skip says why the example did not run ("" when it ran).
	Skip    string
	Exit    int
	Output  string
	Elapsed time.Duration
	// Err is how it broke its promise; nil when it kept it.
	Err error
}

// runBlock runs b's examples one by one in one bash started in dir, each
// bounded by timeout, and returns what became of each. skip, when it
// returns a reason, leaves an example out. The block stops at the first
// example that fails; the rest are skipped naming it.
func runBlock(ctx context.Context, dir string, env []string, b block, timeout time.Duration, skip func(example) string) []outcome {
	outs := make([]outcome, len(b.Examples))
	for i, e := range b.Examples {
		outs[i].Example = e
	}
	abort := func(from int, why string) []outcome {
		for i := from; i < len(outs); i++ {
			outs[i].Skip = why
		}
		return outs
	}
	tmp, err := os.MkdirTemp("", "portico-readme-")
	if err != nil {
		outs[0].Err = err
		return abort(1, "not run: the shell did not start")
	}
	defer os.RemoveAll(tmp)
	sh, err := startShell(dir, env)
	if err != nil {
		outs[0].Err = err
		return abort(1, "not run: the shell did not start")
	}
	defer sh.stop()

	for i, e := range b.Examples {
		o := &outs[i]
		if o.Skip = skip(e); o.Skip != "" {
			continue
		}
		script := filepath.Join(tmp, fmt.Sprintf("cmd-%d.sh", i))
		output := filepath.Join(tmp, fmt.Sprintf("out-%d", i))
		if err := os.WriteFile(script, []byte(e.Cmd+"\n"), 0o600); err != nil {
			o.Err = err
			return abort(i+1, "not run: "+e.where()+" failed")
		}
		// Sourced, so its variables and aliases stay for the next ones;
		// stdin closed, so nothing waits for input; the exit status with
		// the example's index on fd 3.
		start := time.Now()
		o.Exit, o.Err = sh.run(ctx, fmt.Sprintf("{ . %s; } >%s 2>&1 </dev/null; echo \"%d $?\" >&3\n", shellQuote(script), shellQuote(output), i), i, timeout)
		o.Elapsed = time.Since(start)
		out, _ := os.ReadFile(output)
		o.Output = string(out)
		if o.Err == nil {
			o.Err = verdict(e, o.Exit, o.Output)
		}
		if o.Err != nil {
			return abort(i+1, "not run: "+e.where()+" failed")
		}
	}
	return outs
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shell is a bash reading commands from the test, reporting each one's
// exit status on fd 3. It runs in a process group of its own, so stop
// also ends what the examples left in the background.
type shell struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	records chan string
}

func startShell(dir string, env []string) (*shell, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-o", "pipefail", "-O", "expand_aliases", "-s")
	cmd.Dir, cmd.Env = dir, env
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		r.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, err
	}
	sh := &shell{cmd: cmd, stdin: stdin, records: make(chan string, 1)}
	go func() {
		defer r.Close()
		defer close(sh.records)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			sh.records <- sc.Text()
		}
	}()
	return sh, nil
}

// run sends line to the shell and waits for example i's exit status.
func (sh *shell) run(ctx context.Context, line string, i int, timeout time.Duration) (int, error) {
	if _, err := io.WriteString(sh.stdin, line); err != nil {
		return -1, fmt.Errorf("the shell is gone: %w", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case rec, ok := <-sh.records:
		if !ok {
			return -1, errors.New("the shell exited (does the example call exit?)")
		}
		idx, status, _ := strings.Cut(rec, " ")
		exit, err := strconv.Atoi(status)
		if err != nil || idx != strconv.Itoa(i) {
			return -1, fmt.Errorf("unexpected status record %q", rec)
		}
		return exit, nil
	case <-t.C:
		sh.kill()
		return -1, fmt.Errorf("did not finish in %v", timeout)
	case <-ctx.Done():
		sh.kill()
		return -1, ctx.Err()
	}
}

func (sh *shell) kill() { _ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL) }

// stop ends the shell and anything left in its process group.
func (sh *shell) stop() {
	sh.stdin.Close()
	done := make(chan struct{})
	go func() { _ = sh.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	sh.kill()
	<-done
}

// readmeBlocks parses the shell blocks of readmes.
func readmeBlocks(t *testing.T) []block {
	t.Helper()
	var all []block
	for _, file := range readmes {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseExamples(file, string(src))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, blocks...)
	}
	return all
}

// binariesRun lists the programs the blocks to run call from bin/, which
// the test must build beside the launcher's.
func binariesRun(blocks []block) []string {
	var names []string
	for _, b := range blocks {
		if b.NotRun != "" {
			continue
		}
		for _, e := range b.Examples {
			for _, m := range binRun.FindAllStringSubmatch(e.Cmd, -1) {
				if !slices.Contains(names, m[1]) {
					names = append(names, m[1])
				}
			}
		}
	}
	return names
}

// readmeExamples runs the README examples against the running platform,
// one subtest per command, named by its README line.
func (r *makeRun) readmeExamples(t *testing.T, blocks []block) {
	noEnvoy := func(example) string { return "" }
	var skippedEnvoy []string
	if r.envoy == "" {
		noEnvoy = func(e example) string {
			if !e.NeedsEnvoy {
				return ""
			}
			skippedEnvoy = append(skippedEnvoy, e.where())
			return "SKIPPED: needs Envoy, and no envoy binary is installed (set ENVOY_BIN or put envoy on PATH)"
		}
	}
	env := os.Environ()
	ran := 0
	for _, b := range blocks {
		if b.NotRun != "" {
			t.Logf("%s:%d: block not run: %s", b.File, b.Line, b.NotRun)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(b.Examples)+1)*exampleTimeout)
		outs := runBlock(ctx, r.root, env, b, exampleTimeout, noEnvoy)
		cancel()
		for _, o := range outs {
			t.Run(o.Example.where(), func(t *testing.T) {
				switch {
				case o.Skip != "":
					t.Skip(o.Skip)
				case o.Err != nil:
					t.Errorf("%s: %v\n$ %s\n%s", o.Example.where(), o.Err, o.Example.Cmd, o.Output)
				default:
					ran++
					t.Logf("ok in %v\n$ %s\n%s", o.Elapsed.Round(time.Millisecond), o.Example.Cmd, truncate(o.Output, 2000))
				}
			})
		}
	}
	if len(skippedEnvoy) > 0 {
		t.Logf("SKIPPED without Envoy (%d): %s", len(skippedEnvoy), strings.Join(skippedEnvoy, ", "))
	}
	if ran == 0 && !t.Failed() {
		t.Error("no README example ran: the parser found none?")
	}
}

// truncate keeps the start of a long output.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d more bytes)", len(s)-n)
}
