package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// comparison is one row group of the table: the benchmarks of one
// side-by-side comparison and the metrics shown for them.
type comparison struct {
	title string
	// pkg is the package's path inside the module ("kvnode/cp").
	pkg string
	// bench matches benchmark names (GOMAXPROCS suffix removed).
	bench *regexp.Regexp
	// units selects the metrics shown (nil: the "-ratio" convention).
	units *regexp.Regexp
	// note is shown after the metrics: what the numbers are, or where
	// they are kept when the comparison is not read here (linkOnly).
	note     string
	linkOnly bool
}

// comparisons are the side-by-side benchmarks BENCHMARKS.md describes, in
// its order.
var comparisons = []comparison{
	{title: "scheduler vs River", pkg: "scheduler", bench: regexp.MustCompile(`^BenchmarkSchedulerVsRiver(/|$)`)},
	{title: "ratelimitsvc vs envoyproxy/ratelimit", pkg: "ratelimitsvc", bench: regexp.MustCompile(`^BenchmarkPeer(TLS)?(/|$)`)},
	{title: "kvnode CP vs etcd", pkg: "kvnode/cp", bench: regexp.MustCompile(`^BenchmarkCPVsEtcd(/|$)`)},
	{title: "cachenode vs redis-server", pkg: "cachenode", bench: regexp.MustCompile(`^BenchmarkVsRedisServer(/|$)`),
		note: "per-cpu: cachenode's ops per CPU-second ÷ redis-server's, > 1 favours cachenode"},
	{title: "cachenode vs redis-server: sorted sets", pkg: "cachenode", bench: regexp.MustCompile(`^BenchmarkZsetVsRedisServer(/|$)`),
		note: "ZADD, ZINCRBY, ZRANGEBYSCORE; per-cpu > 1 favours cachenode"},
	{title: "cachenode vs redis-server: blocking lists", pkg: "cachenode", bench: regexp.MustCompile(`^BenchmarkBlockingVsRedisServer(/|$)`),
		note: "LPUSH+BLPOP at once; per-cpu > 1 favours cachenode; p99 is BLPOP's, wait for a push included"},
	{title: "cachenode vs redis-server: EVALSHA", pkg: "cachenode", bench: regexp.MustCompile(`^BenchmarkEvalShaVsRedisServer(/|$)`),
		note: "ratelimitsvc's token-bucket script; per-cpu > 1 favours cachenode"},
	{title: "cachenode cluster vs redis-server cluster", pkg: "cachenode", bench: regexp.MustCompile(`^BenchmarkClusterVsRedisCluster(/|$)`),
		note: "3 primaries a side; per-cpu over the side's three processes, > 1 favours cachenode"},
	{title: "controlplane propagation", pkg: "controlplane", bench: regexp.MustCompile(`^BenchmarkPropagation`),
		units: regexp.MustCompile(`^(p50|p99|max)-ms$`), note: "absolute ms, no peer; targets p99 < 1 s, at scale < 2 s"},
}

var ratioUnit = regexp.MustCompile(`-ratio$`)

type metric struct {
	unit  string
	value float64
}

type result struct {
	pkg, name string
	metrics   []metric
}

func (r result) get(unit string) (float64, bool) {
	for _, m := range r.metrics {
		if m.unit == unit {
			return m.value, true
		}
	}
	return 0, false
}

// output is what parse found.
type output struct {
	cpu     string
	procs   string
	results []result
	// statuses are the benchmarks that skipped or failed, in order.
	statuses []status
}

// status is a benchmark's "SKIP" or "FAIL" line and the first line of its
// log (why).
type status struct {
	pkg, name, what, why string
}

func (o *output) machine() string {
	s := "cpu " + strings.TrimSpace(o.cpu)
	if o.cpu == "" {
		s = "cpu unknown"
	}
	if o.procs != "" {
		s += ", GOMAXPROCS " + o.procs
	}
	return s
}

var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// parse reads go test -bench output. A result line's metrics may come on a
// later line than its name when something else (a child process) wrote in
// between: the name is kept until its numbers arrive.
func parse(r io.Reader) (*output, error) {
	out := &output{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var pkg, pending string
	var last *status // a SKIP or FAIL whose reason is the next log line
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg, pending = strings.TrimPrefix(line, "pkg: "), ""
			continue
		case strings.HasPrefix(line, "cpu: "):
			out.cpu = strings.TrimPrefix(line, "cpu: ")
			continue
		case strings.HasPrefix(trimmed, "--- SKIP: Benchmark"), strings.HasPrefix(trimmed, "--- FAIL: Benchmark"):
			f := strings.Fields(trimmed)
			out.statuses = append(out.statuses, status{pkg: pkg, name: procsSuffix.ReplaceAllString(f[2], ""), what: strings.TrimSuffix(f[1], ":")})
			last = &out.statuses[len(out.statuses)-1]
			continue
		case last != nil && strings.HasPrefix(line, "    "):
			last.why, last = trimmed, nil
			continue
		}
		last = nil
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := ""
		if strings.HasPrefix(f[0], "Benchmark") {
			name, f = f[0], f[1:]
			if len(f) == 0 || !isInt(f[0]) {
				pending = name // its numbers come later
				continue
			}
		} else if pending != "" && isInt(f[0]) && len(f) >= 3 && f[2] == "ns/op" {
			name = pending
		} else {
			continue
		}
		pending = ""
		if m := procsSuffix.FindStringSubmatch(name); m != nil {
			out.procs = m[1]
			name = strings.TrimSuffix(name, m[0])
		}
		res := result{pkg: pkg, name: name}
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			res.metrics = append(res.metrics, metric{unit: f[i+1], value: v})
		}
		out.results = append(out.results, res)
	}
	return out, sc.Err()
}

func isInt(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// inPkg reports whether the import path pkg is the module's package rel.
func inPkg(pkg, rel string) bool { return strings.HasSuffix(pkg, "/"+rel) }

func render(w io.Writer, out *output) error {
	fmt.Fprintln(w, "Ratios: Portico ÷ peer in the same run, median of round pairs [min–max];")
	fmt.Fprintln(w, "throughput > 1 and latency or CPU < 1 favour Portico. Each round is in the benchmark's log above.")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "comparison\tbenchmark\tmetric\tvalue")
	fmt.Fprintln(tw, "----------\t---------\t------\t-----")
	claimed := map[int]bool{}
	for _, c := range comparisons {
		title := c.title
		row := func(bench, unit, value string) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", title, bench, unit, value)
			title = ""
		}
		if c.linkOnly {
			row("-", "-", c.note)
			for i, r := range out.results {
				if inPkg(r.pkg, c.pkg) || strings.Contains(r.pkg, "/"+c.pkg+"/") {
					claimed[i] = true
				}
			}
			continue
		}
		found, measured := false, false
		for i, r := range out.results {
			if !inPkg(r.pkg, c.pkg) || !c.bench.MatchString(r.name) {
				continue
			}
			claimed[i], found, measured = true, true, true
			units := c.units
			if units == nil {
				units = ratioUnit
			}
			bench := strings.TrimPrefix(r.name, "Benchmark")
			for _, m := range ordered(r.metrics) {
				if !units.MatchString(m.unit) {
					continue
				}
				row(bench, m.unit, value(r, m))
				bench = ""
			}
			if bench != "" {
				row(bench, "-", "no metric of this comparison reported")
			}
		}
		for _, st := range out.statuses {
			if inPkg(st.pkg, c.pkg) && c.bench.MatchString(st.name) {
				row(strings.TrimPrefix(st.name, "Benchmark"), "-", st.what+": "+st.why)
				found = true
			}
		}
		if !found {
			row("-", "-", "not in this output (run it: see BENCHMARKS.md)")
		} else if measured && c.note != "" {
			row("", "", "("+c.note+")")
		}
	}
	var other bool
	for i, r := range out.results {
		if claimed[i] {
			continue
		}
		for _, m := range r.metrics {
			if !ratioUnit.MatchString(m.unit) {
				continue
			}
			title := ""
			if !other {
				title, other = "other ratios", true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", title, pkgRel(r.pkg)+" "+strings.TrimPrefix(r.name, "Benchmark"), m.unit, value(r, m))
		}
	}
	return tw.Flush()
}

// value formats a metric, with the round spread of a "-ratio".
func value(r result, m metric) string {
	s := format(m.value)
	lo, okLo := r.get(m.unit + "-min")
	hi, okHi := r.get(m.unit + "-max")
	if ratioUnit.MatchString(m.unit) && okLo && okHi {
		s += fmt.Sprintf(" [%s–%s]", format(lo), format(hi))
	}
	return s
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// pkgRel is an import path inside the module (a github.com module's path
// has three elements).
func pkgRel(pkg string) string {
	if p := strings.SplitN(pkg, "/", 4); len(p) == 4 && p[0] == "github.com" {
		return p[3]
	}
	return pkg
}

// metricOrder puts throughput before latency before CPU, whatever the
// alphabetical order go test prints them in.
var metricOrder = []string{"throughput", "put", "cas", "p50", "p99", "max", "cpu"}

func ordered(ms []metric) []metric {
	rank := func(unit string) int {
		for i, p := range metricOrder {
			if strings.HasPrefix(unit, p) {
				return i
			}
		}
		return len(metricOrder)
	}
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b metric) int { return rank(a.unit) - rank(b.unit) })
	return out
}
