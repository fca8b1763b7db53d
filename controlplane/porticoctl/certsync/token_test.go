package certsync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
	"github.com/portico-io/portico/internal/authn"
)

const tokenSecret = prefix + "admin-token"

// TestEnsureAdminTokenCreatesOnceAndKeeps: the first call makes a token the
// control plane accepts as its token file; later calls only read it.
func TestEnsureAdminTokenCreatesOnceAndKeeps(t *testing.T) {
	srv, c, _, _ := setup(t)
	ctx := context.Background()
	labels := map[string]string{"app.kubernetes.io/instance": "portico"}
	r, err := EnsureAdminToken(ctx, c, tokenSecret, labels)
	if err != nil || r.Action != Created || r.Secret != tokenSecret {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	sec, ok := srv.Secret(tokenSecret)
	if !ok {
		t.Fatal("no Secret")
	}
	plain := string(sec.Data[KeyToken])
	id, err := authn.ParseTokenID(plain)
	if err != nil || len(sec.Data) != 1 || sec.Type != kubesecret.TypeOpaque {
		t.Fatalf("Secret %s: type %q, %d keys, token id %q (%v)", tokenSecret, sec.Type, len(sec.Data), id, err)
	}
	if r.ID != "token "+id || sec.Metadata.Annotations[AnnotationTokenID] != id || strings.Contains(r.ID+r.Reason, plain) {
		t.Errorf("result %+v, annotations %v: want the id %s and never the token", r, sec.Metadata.Annotations, id)
	}
	if sec.Metadata.Labels["app.kubernetes.io/instance"] != "portico" || sec.Metadata.Labels[labelManagedBy] != managedBy {
		t.Errorf("labels %v", sec.Metadata.Labels)
	}
	// What the kubelet would mount (0440 with the pod's fsGroup) is a
	// token file the control plane accepts, with this id.
	file := filepath.Join(t.TempDir(), KeyToken)
	if err := os.WriteFile(file, sec.Data[KeyToken], 0o440); err != nil {
		t.Fatal(err)
	}
	if tok, created, err := authn.BootstrapToken(file); err != nil || created || tok.ID != id {
		t.Errorf("BootstrapToken of the mounted Secret: id %q, created %v, %v", tok.ID, created, err)
	}

	srv.Requests()
	r, err = EnsureAdminToken(ctx, c, tokenSecret, labels)
	if err != nil || r.Action != Kept || r.ID != "token "+id {
		t.Fatalf("second run: %+v, %v", r, err)
	}
	if w := writes(srv.Requests()); len(w) != 0 {
		t.Errorf("second run wrote %v", w)
	}
	if again, _ := srv.Secret(tokenSecret); string(again.Data[KeyToken]) != plain {
		t.Error("the token changed")
	}
}

// TestEnsureAdminTokenNeverReplaces: a Secret that does not hold a token is
// an error, left as it is; one brought by the user (trailing newline) is
// kept.
func TestEnsureAdminTokenNeverReplaces(t *testing.T) {
	srv, c, _, _ := setup(t)
	ctx := context.Background()
	mine := authn.NewToken()
	srv.Put(kubesecret.Secret{Metadata: kubesecret.Metadata{Name: tokenSecret}, Type: kubesecret.TypeOpaque,
		Data: map[string][]byte{KeyToken: []byte(mine.Plaintext + "\n")}})
	if r, err := EnsureAdminToken(ctx, c, tokenSecret, nil); err != nil || r.Action != Kept || r.ID != "token "+mine.ID {
		t.Errorf("the user's token: %+v, %v", r, err)
	}
	for name, data := range map[string]map[string][]byte{
		"not a token": {KeyToken: []byte("hunter2")},
		"other key":   {"password": []byte(mine.Plaintext)},
		"empty":       nil,
	} {
		srv.Put(kubesecret.Secret{Metadata: kubesecret.Metadata{Name: tokenSecret}, Type: kubesecret.TypeOpaque, Data: data})
		srv.Requests()
		_, err := EnsureAdminToken(ctx, c, tokenSecret, nil)
		if !errors.Is(err, ErrBadToken) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want ErrBadToken without the content", name, err)
		}
		if w := writes(srv.Requests()); len(w) != 0 {
			t.Errorf("%s: wrote %v", name, w)
		}
	}
	if _, err := EnsureAdminToken(ctx, c, "", nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no name: %v", err)
	}
}

// TestEnsureAdminTokenLosesTheRace: another run creates the Secret between
// our read and our create; we keep theirs.
func TestEnsureAdminTokenLosesTheRace(t *testing.T) {
	srv, c, _, _ := setup(t)
	theirs := authn.NewToken()
	srv.BeforeWrite = func(r kubesecrettest.Request) {
		srv.BeforeWrite = nil
		srv.Put(kubesecret.Secret{Metadata: kubesecret.Metadata{Name: tokenSecret}, Type: kubesecret.TypeOpaque,
			Data: map[string][]byte{KeyToken: []byte(theirs.Plaintext)}})
	}
	r, err := EnsureAdminToken(context.Background(), c, tokenSecret, nil)
	if err != nil || r.Action != Kept || r.ID != "token "+theirs.ID {
		t.Fatalf("%+v, %v; want the other run's token kept", r, err)
	}
	if s, _ := srv.Secret(tokenSecret); string(s.Data[KeyToken]) != theirs.Plaintext {
		t.Error("the other run's token was replaced")
	}
}
