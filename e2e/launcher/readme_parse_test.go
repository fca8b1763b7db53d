package launcher

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

const fixtureREADME = "# Fixture\n" + // line 1
	"\n" +
	"<!-- not-run: starts what the test starts -->\n" + // 3
	"\n" +
	"```sh\n" + // 5
	"make run   # the platform\n" +
	"```\n" +
	"\n" +
	"```\n" + // 9: an illustration, never run
	"bin/kvnode --node-id kv0\n" +
	"```\n" +
	"\n" +
	"```sh\n" + // 13
	"# a note before the first command\n" +
	"curl -si localhost:10000/public      # 200 from the echo upstream\n" + // 15
	"KEY=$(curl -s -X POST https://localhost:18080/keys \\\n" + // 16
	"  -H 'If-Match: \"2\" # not a comment' | jq -r .key)\n" +
	"for i in $(seq 3); do\n" + // 18
	"  echo $i\n" +
	"done\n" +
	"                                     # 200 ×10: a note, not a promise\n" +
	"curl -s -o /dev/null -w '%{http_code}\\n' https://localhost:18000/  # 415: TLS accepted\n" + // 22
	"redis-cli -p 6380 GET greeting     # through Envoy\n" + // 23
	"curl -s https://localhost:18080/admin/v1/listeners -d '{\"port\":10443}'  # config, not a call to Envoy\n" + // 24
	"bin/porticoctl certs renew\n" + // 25
	"```\n"

func TestParseExamples(t *testing.T) {
	blocks, err := parseExamples("F.md", fixtureREADME)
	if err != nil {
		t.Fatal(err)
	}
	want := []block{
		{File: "F.md", Line: 5, NotRun: "starts what the test starts", Examples: []example{
			{File: "F.md", Line: 6, Cmd: "make run   # the platform"},
		}},
		{File: "F.md", Line: 13, Examples: []example{
			{File: "F.md", Line: 15, Cmd: "curl -si localhost:10000/public      # 200 from the echo upstream", Status: "200", NeedsEnvoy: true},
			{File: "F.md", Line: 16, Cmd: "KEY=$(curl -s -X POST https://localhost:18080/keys \\\n  -H 'If-Match: \"2\" # not a comment' | jq -r .key)"},
			{File: "F.md", Line: 18, Cmd: "for i in $(seq 3); do\n  echo $i\ndone"},
			{File: "F.md", Line: 22, Cmd: "curl -s -o /dev/null -w '%{http_code}\\n' https://localhost:18000/  # 415: TLS accepted", Status: "415"},
			{File: "F.md", Line: 23, Cmd: "redis-cli -p 6380 GET greeting     # through Envoy", NeedsEnvoy: true},
			{File: "F.md", Line: 24, Cmd: "curl -s https://localhost:18080/admin/v1/listeners -d '{\"port\":10443}'  # config, not a call to Envoy"},
			{File: "F.md", Line: 25, Cmd: "bin/porticoctl certs renew"},
		}},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Errorf("parseExamples:\n got %+v\nwant %+v", blocks, want)
	}
	// make run (bin/launch is not what it runs) is in a not-run block.
	if got := binariesRun(blocks); !reflect.DeepEqual(got, []string{"porticoctl"}) {
		t.Errorf("binariesRun = %q, want [porticoctl]", got)
	}
}

func TestParseExamplesRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"a marker without a reason": "<!-- not-run: -->\n```sh\ntrue\n```\n",
		"an open quote":             "```sh\necho 'open\n```\n",
		"a continuation at the end": "```sh\necho a \\\n```\n",
		"an unclosed block":         "```sh\ntrue\n",
	} {
		if _, err := parseExamples("F.md", src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPrintedStatus(t *testing.T) {
	for out, want := range map[string]string{
		"HTTP/2 401 \r\ncontent-type: application/json\r\n\r\n{}": "401",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n":   "201",
		"415\n":                "415",
		`{"items":[]}` + "200": "", // a code glued to a body is not a field of its own
		"000":                  "000",
		"hello world":          "",
	} {
		got, ok := printedStatus(out)
		if got != want || ok != (want != "") {
			t.Errorf("printedStatus(%q) = %q, %v; want %q", out, got, ok, want)
		}
	}
}

// TestRunBlockHoldsExamplesToTheirWord runs fixture blocks through the
// same runner as the README's: an example whose comment promises the wrong
// status, one that fails, one that hangs, and the ones that keep their word.
func TestRunBlockHoldsExamplesToTheirWord(t *testing.T) {
	const src = "```sh\n" +
		"X=404; alias status='printf \"HTTP/1.1 %s Nope\\r\\n\\r\\n\"'\n" + // 2: state for the next lines
		"status \"$X\"                 # 404: kept\n" + // 3
		"printf '%s\\n' body \"$X\"     # 404, from -w '%{http_code}'\n" + // 4
		"false || echo refused        # refused: no status promised, exit 0\n" + // 5
		"curl -si localhost:10000/    # skipped: needs Envoy\n" + // 6
		"status \"$X\"                 # 200: deliberately wrong\n" + // 7
		"echo never\n" + // 8
		"```\n" +
		"```sh\n" + // 10
		"false | true                 # pipefail makes this fail\n" + // 11
		"```\n" +
		"```sh\n" + // 13
		"sleep 30\n" + // 14
		"```\n"
	blocks, err := parseExamples("F.md", src)
	if err != nil {
		t.Fatal(err)
	}
	skip := func(e example) string {
		if e.NeedsEnvoy {
			return "needs Envoy"
		}
		return ""
	}
	run := func(b block, timeout time.Duration) []outcome {
		return runBlock(context.Background(), t.TempDir(), os.Environ(), b, timeout, skip)
	}

	outs := run(blocks[0], 10*time.Second)
	if len(outs) != 7 {
		t.Fatalf("%d outcomes, want 7: %+v", len(outs), outs)
	}
	for _, o := range outs[:4] {
		if o.Skip != "" || o.Err != nil {
			t.Errorf("%s: %+v, want it kept", o.Example.where(), o)
		}
	}
	if outs[4].Skip != "needs Envoy" {
		t.Errorf("F.md:6: skip %q, want needs Envoy", outs[4].Skip)
	}
	if o := outs[5]; o.Err == nil || !strings.Contains(o.Err.Error(), "HTTP 404, the comment promises 200") {
		t.Errorf("F.md:7: %v, want the wrong status named", o.Err)
	}
	if o := outs[6]; o.Skip != "not run: F.md:7 failed" {
		t.Errorf("F.md:8: skip %q, want it not run after F.md:7 failed", o.Skip)
	}

	if o := run(blocks[1], 10*time.Second)[0]; o.Err == nil || o.Exit != 1 {
		t.Errorf("F.md:11: %+v, want exit status 1", o)
	}

	start := time.Now()
	if o := run(blocks[2], 200*time.Millisecond)[0]; o.Err == nil || !strings.Contains(o.Err.Error(), "did not finish") {
		t.Errorf("F.md:14: %v, want a timeout", o.Err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the hung example held the runner for %v", d)
	}
}
