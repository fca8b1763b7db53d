package samples

import (
	"strconv"
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	now := int64(0)
	r := New(4, func() int64 { now++; return now })
	if got := r.Recent(10, ""); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range 6 {
		ns := "a"
		if i%2 == 1 {
			ns = "b"
		}
		r.Add(ns, "k"+strconv.Itoa(i))
	}
	r.Add("a", strings.Repeat("x", MaxKey+1)) // not kept
	got := r.Recent(10, "")
	if len(got) != 4 || got[0].Key != "k2" || got[3].Key != "k5" || got[3].At != 6 {
		t.Fatalf("newest four, oldest first: %+v", got)
	}
	if got := r.Recent(10, "a"); len(got) != 2 || got[0].Key != "k2" || got[1].Key != "k4" {
		t.Fatalf("namespace a: %+v", got)
	}
	if got := r.Recent(1, ""); len(got) != 1 || got[0].Key != "k5" {
		t.Fatalf("newest one: %+v", got)
	}
}
