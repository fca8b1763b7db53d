package command

import (
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "abcd", false}, {"h?llo", "hello", true},
		{"h?llo", "hllo", false}, {"h[ae]llo", "hallo", true}, {"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true}, {"h[^e]llo", "hello", false}, {"h[a-b]llo", "hbllo", true},
		{"h[b-a]llo", "hallo", true}, {"h[a-b]llo", "hcllo", false}, {`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false}, {"user:*:name", "user:42:name", true}, {"user:*:name", "user:42:age", false},
		{"[", "[", false}, {"a[", "a", false}, {"**a", "ba", true}, {"*a*b*c", "xaybzc", true},
	} {
		if got := globMatch([]byte(tc.p), []byte(tc.s)); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

// TestGlobMatchAdversarial: patterns that make naive recursive matchers
// exponential finish quickly.
func TestGlobMatchAdversarial(t *testing.T) {
	p := []byte(strings.Repeat("*a", 30) + "b")
	s := []byte(strings.Repeat("a", 5000))
	done := make(chan bool)
	go func() { done <- globMatch(p, s) }()
	select {
	case got := <-done:
		if got {
			t.Fatal("matched")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("globMatch is not linear-ish on adversarial input")
	}
}
