package main

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/summary.golden")

// testdata/bench.txt holds what the table must cope with: a result whose
// numbers follow a child's log line, a skipped and a failed comparison, a
// benchmark written before the "-ratio" convention, a comparison's
// sub-benchmarks beside a benchmark of its package that it does not show,
// a ratio outside every comparison, and comparisons absent from the output.
func TestSummaryGolden(t *testing.T) {
	f, err := os.Open("testdata/bench.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	got.WriteString(out.machine() + "\n")
	if err := render(&got, out); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("testdata/summary.golden", got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/summary.golden")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("summary differs from testdata/summary.golden (go test -update to accept):\n%s", got.String())
	}
}
