// Package rollout moves the fleet of xDS clients from one config version to
// another in waves, with a bake time per wave and automatic rollback when a
// wave's NACK ratio passes a threshold.
//
// # Deploy modes
//
// In ModeAuto (the default) every new config version goes to every node at
// once, as the publisher does without a rollout controller. In ModeManual
// new versions are committed but not served: the fleet stays on the
// deployed version and only rollouts move it. All replicas must run in the
// same mode. In auto mode the deployed version is normally the head, so a
// rollout there targets some other version explicitly; staged rollouts of
// new changes are what manual mode is for.
//
// In both modes at most one rollout runs at a time, and while it runs it
// decides every node's snapshot: nodes in the waves started so far get the
// TARGET version, every other node stays on the BASELINE (the version
// deployed when the rollout started). Versions committed during a rollout
// queue behind it: in auto mode the latest is deployed once the rollout
// ends; in manual mode they wait for a rollout of their own.
//
// # Waves
//
// A wave selects node groups (node metadata portico.group) or a percentage
// of nodes. Membership is cumulative: a node is in the rollout once any wave
// up to the current one selects it. Percent waves use a stable hash of the
// node id (fnv32a(id) % 100 < percent, see Bucket), so a later, larger
// percentage keeps every node an earlier one selected.
//
// After a wave starts the leader waits until every node in the rollout has
// ACKed or NACKed the target version for every resource type it has been
// sent (a node with no types yet is pending), or until the bake time
// elapses. The NACK ratio is the number of rollout nodes that NACKed the
// target divided by the number of rollout nodes (pending ones included).
// When it is above MaxNackRatio the rollout is rolled back: with
// MaxNackRatio 0 the first NACK is decisive and rolls back at once.
// Otherwise, once the bake time has elapsed (and at least MinNodes nodes
// are in the rollout), the next wave starts; after the last wave the
// rollout has succeeded and the target is the deployed version. A wave in
// which no node is connected completes when its bake time elapses, unless
// MinNodes asks for more. NACKs are matched by version string, so a node
// that NACKed the same target version in an earlier rollout counts as
// NACKing it again.
//
// Rollback calls Config.Rollback, which creates a new config version whose
// content equals the baseline (ARCHITECTURE: "Rollback = a new version
// whose content equals an old one"); that version becomes the deployed one
// for every node. If Rollback fails the rollout keeps running with the
// target on its wave and the decision is retried on the next pass. Abort
// ends a running rollout and returns every node to the baseline without
// making a version.
//
// # Replicas
//
// State lives in Postgres (schema controlplane: rollouts, deployment,
// rollout_reports, rollout_replicas). One replica leads, holding a session
// advisory lock on a dedicated connection (re-tried every pass by the
// others): only the leader advances waves and decides rollbacks. Every
// replica, leader or not, reads the running rollout each pass, applies it
// to its own xDS server, and reports the state of its own nodes that are in
// the rollout; the leader evaluates the union of fresh reports. Reports are
// deleted when the rollout ends, when the node leaves the replica, or when
// they have not been refreshed for ReportTTL (a replica that died). Before
// the bake time has elapsed the leader decides only once every live replica
// has reported the current wave, so a follower a pass behind cannot make a
// ratio look worse than it is. Timestamps come from the replicas' clocks,
// which are assumed to agree to well within ReportTTL.
//
// Start, Get, List, Abort and Deployed may be called on any replica.
package rollout

import (
	"time"
)

// Deploy modes (Config.Mode).
const (
	ModeAuto   = "auto"
	ModeManual = "manual"
)

// State is a rollout's lifecycle state.
type State string

// Rollout states. Only StateRunning is not final.
const (
	StateRunning    State = "running"
	StateSucceeded  State = "succeeded"
	StateRolledBack State = "rolled_back"
	StateAborted    State = "aborted"
)

// Node states in reports.
const (
	nodePending = "pending"
	nodeAcked   = "acked"
	nodeNacked  = "nacked"
)

// NodeCounts counts the nodes in a rollout by their answer to the target.
type NodeCounts struct {
	Total   int `json:"total"`
	Acked   int `json:"acked"`
	Nacked  int `json:"nacked"`
	Pending int `json:"pending"`
}

// Rollout is a rollout's state as the admin API shows it.
type Rollout struct {
	ID              int64 `json:"id"`
	TargetVersion   int64 `json:"targetVersion"`
	BaselineVersion int64 `json:"baselineVersion"`
	State           State `json:"state"`
	// Wave is the 0-based index of the current (or last) wave.
	Wave          int       `json:"wave"`
	Waves         []Wave    `json:"waves"`
	BakeSeconds   int       `json:"bakeSeconds"`
	MaxNackRatio  float64   `json:"maxNackRatio"`
	MinNodes      int       `json:"minNodes,omitempty"`
	WaveStartedAt time.Time `json:"waveStartedAt"`
	// Nodes are live counts while the rollout runs, the last evaluated
	// counts once it has ended.
	Nodes NodeCounts `json:"nodes"`
	// Error says why a rollout was rolled back or aborted.
	Error string `json:"error"`
	// RollbackVersion is the version a rollback created.
	RollbackVersion int64     `json:"rollbackVersion,omitempty"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
}
