package porticoctl

import (
	"fmt"
	"io"
	"strings"

	"github.com/portico-io/portico/controlplane/admin"
	"github.com/portico-io/portico/controlplane/manifest"
)

// printApply renders an apply's answer: each change with a line diff of
// its YAML (a create in full, an update as changed lines with context, a
// delete by name), then one summary line.
func printApply(w io.Writer, res admin.ApplyResponse) error {
	counts := map[string]int{}
	for _, c := range res.Changes {
		counts[c.Action]++
		mark := map[string]string{"create": "+", "update": "~", "delete": "-"}[c.Action]
		fmt.Fprintf(w, "%s %s/%s (%s)\n", mark, c.Kind, c.Name, c.Action)
		var before, after string
		var err error
		if c.Before != nil {
			if before, err = manifest.YAML(c.Before); err != nil {
				return err
			}
		}
		if c.After != nil {
			if after, err = manifest.YAML(c.After); err != nil {
				return err
			}
		}
		if c.Action == "delete" {
			continue
		}
		for _, l := range lineDiff(splitLines(before), splitLines(after), 2) {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	summary := fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged", counts["create"], counts["update"], counts["delete"], res.Unchanged)
	switch res.Result {
	case admin.ApplyPlanned:
		fmt.Fprintf(w, "dry run against version %d: %s; nothing was changed\n", res.BaseVersion, summary)
	case admin.ApplyUnchanged:
		fmt.Fprintf(w, "unchanged: the live config (version %d) already matches; no version made\n", res.BaseVersion)
	default:
		fmt.Fprintf(w, "applied as version %d: %d created, %d updated, %d deleted, %d unchanged\n", res.Version,
			counts["create"], counts["update"], counts["delete"], res.Unchanged)
	}
	return nil
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// lineDiff is a unified-style diff of a and b ("  " same, "- " removed,
// "+ " added; removals before additions) keeping ctx lines of context around changes ("..." between
// hunks). Resources are small: a quadratic LCS is fine.
func lineDiff(a, b []string, ctx int) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var all []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			all = append(all, "  "+a[i])
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]):
			all = append(all, "+ "+b[j])
			j++
		default:
			all = append(all, "- "+a[i])
			i++
		}
	}
	keep := make([]bool, len(all))
	for k, l := range all {
		if !strings.HasPrefix(l, "  ") {
			for x := max(0, k-ctx); x <= min(len(all)-1, k+ctx); x++ {
				keep[x] = true
			}
		}
	}
	var out []string
	skipped := false
	for k, l := range all {
		if !keep[k] {
			skipped = true
			continue
		}
		if skipped && len(out) > 0 {
			out = append(out, "  ...")
		}
		skipped = false
		out = append(out, l)
	}
	return out
}

// yamlOf renders JSON as YAML for display.
func yamlOf(b []byte) (string, error) { return manifest.YAML(b) }
