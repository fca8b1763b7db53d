package authn

import "time"

// TokenInfo is an API token as every admin API shows it (the control
// plane's and the scheduler's tables, kvnode's Raft keyspace): never the
// secret nor its hash. Tenant and Keyspaces confine it (see Principal).
type TokenInfo struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Roles      []string   `json:"roles"`
	Tenant     string     `json:"tenant,omitempty"`
	Keyspaces  []string   `json:"keyspaces,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	CreatedBy  string     `json:"createdBy"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
	RevokedBy  string     `json:"revokedBy,omitempty"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

// Token page sizes shared by the admin APIs' token lists.
const (
	DefaultTokenPage = 50
	MaxTokenPage     = 200
)
