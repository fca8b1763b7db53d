package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
)

func TestPercentWavesKeepEarlierNodes(t *testing.T) {
	waves := []Wave{{Percent: 10}, {Percent: 50}, {Percent: 100}}
	counts := make([]int, len(waves))
	for i := range 1000 {
		n := nodes.Status{ID: fmt.Sprintf("gw-%d.eu-west", i), Group: nodes.DefaultGroup}
		prev := false
		for w := range waves {
			in := member(waves, w, n)
			if prev && !in {
				t.Fatalf("node %s left the rollout at wave %d", n.ID, w)
			}
			if in {
				counts[w]++
			}
			prev = in
		}
	}
	if counts[2] != 1000 || counts[0] == 0 || counts[0] >= counts[1] || counts[1] >= counts[2] {
		t.Fatalf("members per wave %v", counts)
	}
}

func TestMemberByGroup(t *testing.T) {
	waves := []Wave{{Groups: []string{"canary"}}, {Groups: []string{"eu", "us"}}}
	for _, tc := range []struct {
		group string
		wave  int
		want  bool
	}{
		{"canary", 0, true}, {"eu", 0, false}, {"eu", 1, true}, {"us", 1, true}, {"canary", 1, true}, {"default", 1, false},
	} {
		if got := member(waves, tc.wave, nodes.Status{ID: "x", Group: tc.group}); got != tc.want {
			t.Errorf("group %s wave %d: %v", tc.group, tc.wave, got)
		}
	}
}

func TestNodeState(t *testing.T) {
	ack := func(v string) *nodes.TypeStatus { return &nodes.TypeStatus{AckedVersion: v} }
	for _, tc := range []struct {
		name  string
		types map[string]*nodes.TypeStatus
		want  string
	}{
		{"no types", nil, nodePending},
		{"all acked", map[string]*nodes.TypeStatus{"l": ack("2"), "c": ack("2")}, nodeAcked},
		{"one behind", map[string]*nodes.TypeStatus{"l": ack("2"), "c": ack("1")}, nodePending},
		{"one nacked", map[string]*nodes.TypeStatus{"l": ack("2"), "c": {AckedVersion: "1", Nack: &nodes.Nack{Version: "2", Error: "bad"}}}, nodeNacked},
		{"old nack", map[string]*nodes.TypeStatus{"l": ack("2"), "c": {AckedVersion: "2", Nack: &nodes.Nack{Version: "1"}}}, nodeAcked},
	} {
		if got, _ := nodeState(nodes.Status{Types: tc.types}, "2"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// FuzzSpec: any JSON body either fails with a field error or normalizes to
// a spec that normalizes to itself.
func FuzzSpec(f *testing.F) {
	f.Add([]byte(`{"waves":[{"groups":["canary"]},{"percent":25}],"bakeSeconds":30,"maxNackRatio":0.1}`))
	f.Add([]byte(`{"waves":[{"groups":[]}]}`))
	f.Add([]byte(`{"waves":[{"percent":0}],"minNodes":-1}`))
	f.Add([]byte(`{"targetVersion":3,"waves":[{"groups":["a"],"percent":5}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var s Spec
		if json.Unmarshal(body, &s) != nil {
			return
		}
		n, err := s.normalize()
		if err != nil {
			var fe *spec.FieldError
			if !errors.As(err, &fe) || fe.Field == "" || !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("error %v is not a field error", err)
			}
			return
		}
		again, err := n.normalize()
		if err != nil || !reflect.DeepEqual(again, n) {
			t.Fatalf("normalized spec %+v renormalizes to %+v, %v", n, again, err)
		}
		if n.BakeSeconds < 1 || len(n.Waves) == 0 {
			t.Fatalf("normalized spec %+v", n)
		}
	})
}
