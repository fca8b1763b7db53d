package certsync

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/internal/authn"
)

// The bootstrap admin token Secret (EnsureAdminToken): one key, KeyToken,
// holding a ptk_ API token and nothing else, which the control plane reads
// as its --admin-token-file and registers as an admin token.
const (
	KeyToken = "token"
	// AnnotationTokenID is the token's id (safe to show): what
	// DELETE /admin/v1/tokens/{id} takes to revoke it.
	AnnotationTokenID = "portico.io/token-id"
)

// ErrBadToken is an admin token Secret that does not hold one well-formed
// token. EnsureAdminToken never replaces it; the operator decides.
var ErrBadToken = errors.New("certsync: unusable admin token Secret")

// EnsureAdminToken makes sure the Secret name holds a bootstrap admin
// token. Like the CA, the Secret is created once and never replaced: a
// missing one is created with a token from authn.NewToken; an existing one
// is only read and must hold one token that authn.ParseTokenID accepts
// (surrounding whitespace allowed, as the control plane trims it). The
// Result's ID is "token <id>"; the plaintext is never returned.
func EnsureAdminToken(ctx context.Context, store Store, name string, labels map[string]string) (Result, error) {
	if name == "" {
		return Result{}, fmt.Errorf("%w: an admin token Secret name is required", ErrConfig)
	}
	for range 2 {
		s, err := store.Get(ctx, name)
		if err == nil {
			id, err := tokenID(s)
			if err != nil {
				return Result{}, fmt.Errorf("certsync: admin token Secret %s: %w", name, err)
			}
			return Result{Secret: name, ID: "token " + id, Action: Kept}, nil
		}
		if !errors.Is(err, kubesecret.ErrNotFound) {
			return Result{}, fmt.Errorf("certsync: admin token Secret %s: %w", name, err)
		}
		tok := authn.NewToken()
		sec := &kubesecret.Secret{
			Metadata: kubesecret.Metadata{Name: name, Labels: merge(labels, map[string]string{labelManagedBy: managedBy}),
				Annotations: map[string]string{AnnotationTokenID: tok.ID}},
			Type: kubesecret.TypeOpaque,
			Data: map[string][]byte{KeyToken: []byte(tok.Plaintext)},
		}
		_, err = store.Create(ctx, sec)
		if err == nil {
			return Result{Secret: name, ID: "token " + tok.ID, Action: Created, Reason: "no Secret"}, nil
		}
		if !errors.Is(err, kubesecret.ErrExists) {
			return Result{}, fmt.Errorf("certsync: create admin token Secret %s: %w", name, err)
		}
		// Another run created it first: read and judge that one.
	}
	return Result{}, fmt.Errorf("certsync: admin token Secret %s: created and gone twice, the next run retries", name)
}

func tokenID(s *kubesecret.Secret) (string, error) {
	raw, ok := s.Data[KeyToken]
	if !ok {
		return "", fmt.Errorf("%w: no key %q", ErrBadToken, KeyToken)
	}
	id, err := authn.ParseTokenID(strings.TrimSpace(string(raw)))
	if err != nil {
		// ParseTokenID's message says what is wrong, never the token.
		return "", fmt.Errorf("%w: key %q: %v (put a ptk_ token there, or delete the Secret to have a new one made)", ErrBadToken, KeyToken, err)
	}
	return id, nil
}
