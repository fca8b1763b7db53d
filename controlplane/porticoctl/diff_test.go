package porticoctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/admin"
)

func TestLineDiffKeepsContext(t *testing.T) {
	a := strings.Split("a\nb\nc\nd\ne\nf\ng\nh", "\n")
	b := strings.Split("a\nb\nc\nD\ne\nf\ng\nh\ni", "\n")
	got := strings.Join(lineDiff(a, b, 1), "|")
	want := "  c|- d|+ D|  e|  ...|  h|+ i"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if d := lineDiff(nil, []string{"x"}, 2); len(d) != 1 || d[0] != "+ x" {
		t.Fatalf("create: %v", d)
	}
}

func TestPrintApply(t *testing.T) {
	var buf bytes.Buffer
	err := printApply(&buf, admin.ApplyResponse{Result: admin.ApplyPlanned, DryRun: true, BaseVersion: 4, Unchanged: 3,
		Changes: []admin.ApplyChange{
			{Kind: "clusters", Name: "echo", Action: "update", Before: []byte(`{"name":"echo","port":1}`), After: []byte(`{"name":"echo","port":2}`)},
			{Kind: "routes", Name: "old", Action: "delete", Before: []byte(`{"name":"old"}`)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := "~ clusters/echo (update)\n      name: echo\n    - port: 1\n    + port: 2\n- routes/old (delete)\n" +
		"dry run against version 4: 0 to create, 1 to update, 1 to delete, 3 unchanged; nothing was changed\n"
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}
