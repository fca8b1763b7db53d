// Command benchsummary prints one table of the side-by-side comparisons in
// a `go test -bench` output (what `make bench` writes to .run/bench.txt),
// so the numbers of every comparison are read in one place after a run.
//
// It reads the convention of internal/peerbench (BENCHMARKS.md, "Reading
// the output"): a metric whose unit ends in "-ratio" is Portico's figure
// divided by the peer's, the median over round pairs, with "-ratio-min" and
// "-ratio-max" beside it. Benchmarks written before the convention are
// named in comparisons with the units to show. A comparison absent from the
// output is listed as not run, with the reason when the benchmark skipped
// or failed.
//
//	go run ./tools/benchsummary [.run/bench.txt]
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	path := ".run/bench.txt"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
	defer f.Close()
	out, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
	fmt.Printf("Summary of %s (%s; load average now %s)\n", path, out.machine(), loadAvg())
	if err := render(os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
