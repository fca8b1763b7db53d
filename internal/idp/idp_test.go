package idp

import (
	"errors"
	"testing"
)

func TestCheckURL(t *testing.T) {
	cases := []struct {
		url      string
		loopback bool
		want     error // nil = accepted
	}{
		{"https://idp.example.com/jwks.json", false, nil},
		{"HTTPS://idp.example.com/jwks.json", false, nil},
		{"https://10.0.0.1:8443/introspect?x=1", false, nil},
		{"https://127.0.0.1/jwks", false, nil},
		{"http://idp.example.com/jwks.json", false, ErrInsecure},
		{"http://idp.example.com/jwks.json", true, ErrInsecure},
		{"http://10.0.0.1/jwks", true, ErrInsecure},
		{"http://127.0.0.1:18950/jwks.json", false, ErrInsecure},
		{"http://127.0.0.1:18950/jwks.json", true, nil},
		{"http://127.255.0.7/jwks", true, nil},
		{"http://[::1]:8080/jwks", true, nil},
		{"http://[::ffff:127.0.0.1]/jwks", true, nil},
		{"http://localhost:8080/jwks", true, nil},
		{"http://LOCALHOST/jwks", true, nil},
		{"http://localhost.example.com/jwks", true, ErrInsecure},
		{"http://127.1/jwks", true, ErrInsecure},
		{"http://2130706433/jwks", true, ErrInsecure},
		{"http://[fe80::1%25lo]/jwks", true, ErrInsecure},
		{"http://0.0.0.0/jwks", true, ErrInsecure},
		{"https://user:pw@idp.example.com/jwks", false, ErrInvalid},
		{"http://user@127.0.0.1/jwks", true, ErrInvalid},
		{"https://idp.example.com/jwks#frag", false, ErrInvalid},
		{"https://idp.example.com/jwks#", false, ErrInvalid},
		{"file:///etc/passwd", true, ErrInvalid},
		{"ftp://idp.example.com/jwks", false, ErrInvalid},
		{"idp.example.com/jwks", false, ErrInvalid},
		{"https:///jwks", false, ErrInvalid},
		{"https://idp.example.com/a b", false, ErrInvalid},
		{"", false, ErrInvalid},
	}
	for _, tc := range cases {
		err := CheckURL(tc.url, tc.loopback)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("CheckURL(%q, %v) = %v, want %v", tc.url, tc.loopback, err, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	for id, want := range map[string]bool{"portico": true, "client:1 é": true, "": false, "a\nb": false, "a\x7f": false} {
		if ValidClientID(id) != want {
			t.Errorf("ValidClientID(%q) != %v", id, want)
		}
	}
}
