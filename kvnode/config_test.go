package kvnode

import "testing"

func TestRaftBindAddr(t *testing.T) {
	for _, tc := range []struct{ flag, http, want string }{
		{"", "127.0.0.1:18401", "127.0.0.1:18601"},
		{"", ":18400", ":18600"},
		{"", "", ":18600"},
		{"10.0.0.1:9000", ":18400", "10.0.0.1:9000"},
		{RaftOff, ":18400", ""},
	} {
		got, err := RaftBindAddr(tc.flag, tc.http)
		if err != nil || got != tc.want {
			t.Errorf("RaftBindAddr(%q, %q) = %q, %v; want %q", tc.flag, tc.http, got, err, tc.want)
		}
	}
	for _, http := range []string{"nohostport", "127.0.0.1:65500"} {
		if got, err := RaftBindAddr("", http); err == nil {
			t.Errorf("RaftBindAddr(\"\", %q) = %q, want an error", http, got)
		}
	}
}
