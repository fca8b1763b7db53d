package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func newSealer(t *testing.T) *Sealer {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseKey(k + "\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	s := newSealer(t)
	msg := []byte("-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n")
	a, err := s.Seal(msg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Seal(msg)
	if a == b {
		t.Fatal("two seals of one value are equal: nonce reused")
	}
	if !strings.HasPrefix(a, Prefix) || !IsSealed(a) || strings.Contains(a, "PRIVATE") {
		t.Fatalf("sealed form %q", a)
	}
	got, err := s.Open(a)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Open = %q, %v", got, err)
	}
}

func TestTamperAndWrongKey(t *testing.T) {
	s := newSealer(t)
	v, err := s.Seal([]byte("key material"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, Prefix))
	for i := range raw {
		c := bytes.Clone(raw)
		c[i] ^= 1
		if _, err := s.Open(Prefix + base64.StdEncoding.EncodeToString(c)); !errors.Is(err, ErrOpen) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	if _, err := newSealer(t).Open(v); !errors.Is(err, ErrOpen) {
		t.Fatalf("wrong key: %v", err)
	}
	for _, bad := range []string{"", "v1:", "v1:!!", "v2:" + strings.TrimPrefix(v, Prefix), Prefix + "AAAA"} {
		if _, err := s.Open(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Open(%q) = %v", bad, err)
		}
		if IsSealed(bad) {
			t.Fatalf("IsSealed(%q)", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	for _, bad := range []string{"", "c2hvcnQ=", strings.Repeat("A", 44) + "x"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrKey) {
			t.Fatalf("ParseKey(%q) = %v", bad, err)
		}
	}
	if _, err := New(make([]byte, 16)); !errors.Is(err, ErrKey) {
		t.Fatalf("16-byte key: %v", err)
	}
	raw := bytes.Repeat([]byte{7}, KeySize)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		k, err := ParseKey(enc.EncodeToString(raw))
		if err != nil || !bytes.Equal(k, raw) {
			t.Fatalf("ParseKey: %v", err)
		}
	}
}
