package cp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/portico-io/portico/internal/eventually"
)

// The register-with-CAS model, one register per key (absent = "").
// Values written are unique, and a revision names exactly one value (the
// history is checked for that separately), so a CAS on the revision a
// client read is a CAS on the value it read.
type linInput struct {
	Op     string // get, put, cas, del
	Key    string
	Value  string // put, cas: the new value
	Expect string // cas: the value whose revision was sent in If-Match
}

type linOutput struct {
	Value string // get: "" when absent
	Rev   uint64
	OK    bool // put, cas: applied; del: a value was deleted
	// Unknown: the write may or may not have been applied (timeout, cut
	// connection, 504). Its Return is set past the end of the history.
	Unknown bool
}

var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(linInput), output.(linOutput)
		switch in.Op {
		case "get":
			return out.Value == s, s
		case "put":
			return true, in.Value
		case "cas":
			match := s == in.Expect
			switch {
			case out.Unknown:
				if match {
					return true, in.Value
				}
				return true, s
			case out.OK:
				return match, in.Value
			default:
				return !match, s
			}
		case "del":
			if out.Unknown {
				return true, ""
			}
			return out.OK == (s != ""), ""
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		res := fmt.Sprintf("ok=%v rev=%d", out.OK, out.Rev)
		if out.Unknown {
			res = "unknown"
		}
		switch in.Op {
		case "get":
			return fmt.Sprintf("get(%s) -> %q rev=%d", in.Key, out.Value, out.Rev)
		case "cas":
			return fmt.Sprintf("cas(%s, %q -> %q) -> %s", in.Key, in.Expect, in.Value, res)
		}
		return fmt.Sprintf("%s(%s, %q) -> %s", in.Op, in.Key, in.Value, res)
	},
}

// history records operations from concurrent clients.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	done  atomic.Int64 // operations with a definite outcome
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
	if !op.Output.(linOutput).Unknown {
		h.done.Add(1)
	}
}

// finish returns the history with every unknown-outcome operation's
// Return moved past the last real event: it may take effect at any point
// after its call, or never.
func (h *history) finish() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.now() + 1
	for _, op := range h.ops {
		end = max(end, op.Return+1)
	}
	out := make([]porcupine.Operation, len(h.ops))
	for i, op := range h.ops {
		if op.Output.(linOutput).Unknown {
			op.Return = end
		}
		out[i] = op
	}
	return out
}

// runClient runs random get/put/cas/del operations on a few keys through
// random nodes until stop closes.
// With staleReads, gets ask for ?stale=true (a local read on any node).
func (gr *group) runClient(id int, keys []string, staleReads bool, h *history, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := rand.New(rand.NewPCG(uint64(id), 42))
	hc := &http.Client{Timeout: time.Second}
	type seen struct {
		value string
		rev   uint64
	}
	last := map[string]seen{} // this client's latest read of each key
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		in := linInput{Key: keys[rng.IntN(len(keys))], Value: fmt.Sprintf("c%d-%d", id, seq)}
		var method string
		var hdr map[string]string
		switch p := rng.IntN(100); {
		case p < 40:
			in.Op, method, in.Value = "get", "GET", ""
		case p < 65:
			in.Op, method = "put", "PUT"
		case p < 90:
			in.Op, method = "cas", "PUT"
			in.Expect = last[in.Key].value
			hdr = ifMatch(last[in.Key].rev)
		default:
			in.Op, method, in.Value = "del", "DELETE", ""
		}
		node := gr.nodes[rng.IntN(len(gr.nodes))]
		path := "/v1/cp/ks/" + in.Key
		if staleReads && in.Op == "get" {
			path += "?stale=true"
		}
		call := h.now()
		r, err := do(context.Background(), hc, method, node.httpAddr, path, []byte(in.Value), hdr)
		ret := h.now()
		var out linOutput
		switch {
		case err != nil && errIsDial(err), err == nil && r.status == http.StatusServiceUnavailable:
			continue // never reached a leader: no effect
		case err != nil || r.status >= 500:
			if in.Op == "get" {
				continue // a read that failed had no effect
			}
			out.Unknown = true
		case in.Op == "get" && r.status == http.StatusOK:
			out.Value, out.Rev = string(r.body), r.rev()
			last[in.Key] = seen{out.Value, out.Rev}
		case in.Op == "get" && r.status == http.StatusNotFound:
			last[in.Key] = seen{}
		case r.status == http.StatusOK:
			out.OK, out.Rev = true, r.rev()
		case in.Op == "cas" && r.status == http.StatusPreconditionFailed, in.Op == "del" && r.status == http.StatusNotFound:
			out.Rev = r.rev()
		default:
			gr.t.Errorf("%s %s: unexpected status %d: %s", method, in.Key, r.status, r.body)
			return
		}
		h.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
	}
}

// checkRevisions verifies what the register model abstracts away: every
// revision seen names one value, and a write acknowledged before another
// write started has a smaller revision (revisions are fencing tokens).
func checkRevisions(t *testing.T, ops []porcupine.Operation) {
	t.Helper()
	revOf := map[string]uint64{}
	var writes []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		if out.Unknown {
			continue
		}
		v := ""
		switch {
		case in.Op == "get" && out.Value != "":
			v = out.Value
		case (in.Op == "put" || in.Op == "cas") && out.OK:
			v = in.Value
			writes = append(writes, op)
		}
		if v == "" {
			continue
		}
		if out.Rev == 0 {
			t.Errorf("%s of %q returned revision 0", in.Op, v)
		}
		if r, ok := revOf[v]; ok && r != out.Rev {
			t.Errorf("value %q seen at revisions %d and %d", v, r, out.Rev)
		}
		revOf[v] = out.Rev
	}
	for _, a := range writes {
		for _, b := range writes {
			if a.Return < b.Call && a.Output.(linOutput).Rev >= b.Output.(linOutput).Rev {
				t.Errorf("write %v (rev %d) finished before %v started but got revision >= %d", a.Input, a.Output.(linOutput).Rev, b.Input, b.Output.(linOutput).Rev)
			}
		}
	}
}

func checkLinearizable(t *testing.T, ops []porcupine.Operation) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, 30*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is %s (visualization: %s)", len(ops), res, path)
	}
}

// runClients starts 4 clients on keys x, y, z; waitOps(n) waits for n more
// completed operations, stopClients stops them (idempotent).
func (gr *group) runClients(t *testing.T, staleReads bool) (h *history, waitOps func(int64), stopClients func()) {
	h = &history{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range 4 {
		wg.Add(1)
		go gr.runClient(id, []string{"x", "y", "z"}, staleReads, h, stop, &wg)
	}
	var once sync.Once
	stopClients = func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
		})
	}
	waitOps = func(n int64) {
		target := h.done.Load() + n
		eventually.True(t, 30*time.Second, fmt.Sprintf("%d more completed operations", n), func() bool { return h.done.Load() >= target })
	}
	return h, waitOps, stopClients
}

// TestLinearizableUnderLeaderKill: concurrent clients do get/put/CAS/delete
// on a few keys through every node while the test kills the leader, later
// restarts it, cuts the next leader's Raft network and heals it, and stalls
// the next one past the election timeout and resumes it; the history must be
// linearizable.
func TestLinearizableUnderLeaderKill(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	h, waitOps, stopClients := gr.runClients(t, false)
	defer stopClients()

	waitOps(150)
	gr.kill(leader)
	killedAt := h.now()
	gr.waitLeader()
	waitOps(150)
	gr.start(leader)
	waitOps(150)

	// Partition the current leader's Raft network (its HTTP still answers,
	// and it may believe it leads for a while): the others elect a leader;
	// then heal it.
	cut := gr.waitLeader()
	gr.groupOf(cut).Partition(true)
	gr.waitLeaderExcept(cut)
	waitOps(150)
	gr.groupOf(cut).Partition(false)
	gr.waitLeader()
	waitOps(100)

	// Stall the leader (Raft I/O and HTTP frozen, like a stopped process)
	// past the election timeout, then resume it.
	paused := gr.waitLeader()
	gr.stall(paused)
	gr.waitLeaderExcept(paused)
	waitOps(40) // requests that reach the stalled node hang until the client's timeout
	gr.resume(paused)
	gr.waitLeader()
	waitOps(100)
	stopClients()

	ops := h.finish()
	var unknown, after int
	for _, op := range ops {
		if op.Output.(linOutput).Unknown {
			unknown++
		} else if op.Call > killedAt && op.Output.(linOutput).OK {
			after++
		}
	}
	t.Logf("%d operations, %d with unknown outcome, %d successful writes after the leader was killed", len(ops), unknown, after)
	if after == 0 {
		t.Fatal("no write succeeded after the leader was killed")
	}
	checkRevisions(t, ops)
	checkLinearizable(t, ops)
}

// TestCheckerCatchesStaleReads runs the same workload with local
// (?stale=true) reads on every node, which a follower answers before it has
// applied what the leader committed: the checker must find the history
// illegal. Up to three rounds of operations, so one lucky round (no stale
// read observed) does not fail the test.
func TestCheckerCatchesStaleReads(t *testing.T) {
	gr := newGroup(t, 3)
	gr.waitLeader()
	h, waitOps, stopClients := gr.runClients(t, true)
	defer stopClients()
	for round := 1; round <= 3; round++ {
		waitOps(300)
		h.mu.Lock()
		ops := append([]porcupine.Operation(nil), h.ops...)
		h.mu.Unlock()
		// Operations still running are left out; unknown ones cannot occur
		// without faults but are handled as usual.
		for i := range ops {
			if ops[i].Output.(linOutput).Unknown {
				ops[i].Return = h.now() + int64(time.Hour)
			}
		}
		res := porcupine.CheckOperationsTimeout(registerModel, ops, 30*time.Second)
		t.Logf("round %d: %d operations: %s", round, len(ops), res)
		if res == porcupine.Illegal {
			return
		}
	}
	t.Fatal("stale reads were never caught: the checker or the workload is not doing its job")
}

// TestCheckerCatchesViolations keeps the checker honest: histories a
// stale read or a lost write would produce are rejected, and a legal
// concurrent one is accepted.
func TestCheckerCatchesViolations(t *testing.T) {
	op := func(c int, in linInput, call, ret int64, out linOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"stale read after an acknowledged put", []porcupine.Operation{
			op(0, linInput{Op: "put", Key: "x", Value: "a"}, 0, 10, linOutput{OK: true, Rev: 5}),
			op(1, linInput{Op: "get", Key: "x"}, 20, 30, linOutput{}),
		}, porcupine.Illegal},
		{"read of an overwritten value", []porcupine.Operation{
			op(0, linInput{Op: "put", Key: "x", Value: "a"}, 0, 10, linOutput{OK: true, Rev: 5}),
			op(0, linInput{Op: "cas", Key: "x", Value: "b", Expect: "a"}, 11, 20, linOutput{OK: true, Rev: 6}),
			op(1, linInput{Op: "get", Key: "x"}, 25, 30, linOutput{Value: "a", Rev: 5}),
		}, porcupine.Illegal},
		{"two creates both succeed", []porcupine.Operation{
			op(0, linInput{Op: "cas", Key: "x", Value: "a", Expect: ""}, 0, 10, linOutput{OK: true, Rev: 5}),
			op(1, linInput{Op: "cas", Key: "x", Value: "b", Expect: ""}, 0, 10, linOutput{OK: true, Rev: 6}),
		}, porcupine.Illegal},
		{"read concurrent with a put, and an unknown write", []porcupine.Operation{
			op(0, linInput{Op: "put", Key: "x", Value: "a"}, 0, 10, linOutput{OK: true, Rev: 5}),
			op(1, linInput{Op: "get", Key: "x"}, 5, 8, linOutput{}),
			op(2, linInput{Op: "put", Key: "x", Value: "b"}, 12, 100, linOutput{Unknown: true}),
			op(1, linInput{Op: "get", Key: "x"}, 20, 30, linOutput{Value: "a", Rev: 5}),
			op(1, linInput{Op: "get", Key: "x"}, 40, 50, linOutput{Value: "b", Rev: 7}),
			op(1, linInput{Op: "get", Key: "y"}, 40, 50, linOutput{}),
		}, porcupine.Ok},
	} {
		if got := porcupine.CheckOperationsTimeout(registerModel, tc.ops, 5*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
