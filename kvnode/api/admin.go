package api

import (
	"time"

	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/ring"
)

// The typed answers of the admin routes. Their JSON encoding is a wire
// contract (kvctl and operators' scripts parse it); kvnode's
// testdata/admin/*.golden pin it byte for byte.

// RingView is GET /v1/ring: the token map for partition-aware clients.
type RingView struct {
	Replication int          `json:"replication"`
	Nodes       []RingMember `json:"nodes"`
	Ranges      []ring.Range `json:"ranges"`
	// Pending lists the ring after in-progress joins and leaves, when one
	// is in progress.
	Pending []ring.Range `json:"pending,omitempty"`
}

// RingMember is one node in RingView.
type RingMember struct {
	ID        string   `json:"id"`
	Addr      string   `json:"addr"`
	Rack      string   `json:"rack,omitempty"`
	State     string   `json:"state"`
	Tokens    []uint64 `json:"tokens"`
	Ownership float64  `json:"ownership"`
}

// MemberList is GET /admin/v1/members.
type MemberList struct {
	Items []MemberView `json:"items"`
}

// MemberView is one entry of MemberList.
type MemberView struct {
	ID         string  `json:"id"`
	Addr       string  `json:"addr"`
	Rack       string  `json:"rack,omitempty"`
	State      string  `json:"state"`
	Alive      bool    `json:"alive"`
	Phi        float64 `json:"phi"`
	Generation uint64  `json:"generation"`
	Heartbeat  uint64  `json:"heartbeat"`
	Hints      int     `json:"hintsPending"`
}

// RepairStatus is GET /admin/v1/repair. (The fields are in the order
// earlier versions, which encoded a map, wrote them: sorted by name.)
type RepairStatus struct {
	LastFullRepair time.Time                 `json:"lastFullRepair"`
	LastPass       antientropy.Result        `json:"lastPass"`
	Ranges         []antientropy.RangeStatus `json:"ranges"`
}

// ActionResult is the answer of POST /admin/v1/join and
// /admin/v1/decommission once they complete.
type ActionResult struct {
	Status string `json:"status"`
}

// LoadResult is the answer of POST /admin/v1/restore.
type LoadResult struct {
	Keys int64 `json:"keys"`
}

// CleanupResult is the answer of POST /admin/v1/cleanup.
type CleanupResult struct {
	KeysDeleted int `json:"keysDeleted"`
	// RangesKept are the ranges this node replicates, now or once the
	// pending ring change completes.
	RangesKept int `json:"rangesKept"`
}

// ReplaceResult is the answer of POST /admin/v1/replace.
type ReplaceResult struct {
	// Node is this node (the replacement), Replaced the dead node.
	Node         string   `json:"node"`
	Replaced     string   `json:"replaced"`
	Tokens       []uint64 `json:"tokens"`
	KeysStreamed int      `json:"keysStreamed"`
	// RangesVerified counts (range, replica) pairs whose Merkle trees were
	// compared after streaming; KeysRepaired the keys that comparison
	// still had to exchange (writes that raced the stream).
	RangesVerified int `json:"rangesVerified"`
	KeysRepaired   int `json:"keysRepaired"`
}
