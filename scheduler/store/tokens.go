package store

import "github.com/portico-io/portico/internal/pgtokens"

// Tokens is the REST API's token table (scheduler.api_tokens): tenants'
// tokens and the bootstrap admin token. It is also the API's
// authn.TokenStore.
func (s *Store) Tokens() *pgtokens.Table { return s.tokens }
