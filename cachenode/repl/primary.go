package repl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// Defaults.
const (
	DefaultPingInterval = time.Second
	// DefaultTimeout is Redis's repl-timeout: a replica that acknowledges
	// nothing for this long is dropped, and a replica that hears nothing
	// from its primary for this long reconnects.
	DefaultTimeout = 60 * time.Second
)

// PrimaryConfig configures a Primary.
type PrimaryConfig struct {
	Feed     *Feed
	Registry *namespace.Registry
	// Logger defaults to slog.Default(); Metrics to unregistered ones.
	Logger  *slog.Logger
	Metrics *Metrics
	// PingInterval and Timeout default to DefaultPingInterval and
	// DefaultTimeout.
	PingInterval, Timeout time.Duration
	// Serving, when set, gates SYNC: while it reports false (the node is a
	// replica itself) SYNC is refused. A node being demoted must not stream
	// to its old replicas: its full sync from the new primary starts with a
	// flush that would reach them (the promoted one included) otherwise.
	Serving func() bool
}

// Primary serves SYNC on a bus server: it streams its Feed to replicas.
// Safe for concurrent use.
type Primary struct {
	cfg PrimaryConfig
	log *slog.Logger
	m   *Metrics

	mu       sync.Mutex
	replicas map[*replica]struct{}
}

type replica struct {
	conn    *bus.Conn
	name    string
	online  atomic.Bool  // snapshot sent, streaming
	ack     atomic.Int64 // offset the replica has applied
	lastAck atomic.Int64 // unix ms
}

// NewPrimary returns a Primary; register it on the bus with Register.
func NewPrimary(cfg PrimaryConfig) *Primary {
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	p := &Primary{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, replicas: map[*replica]struct{}{}}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.m == nil {
		p.m = nopMetrics()
	}
	return p
}

// Disconnect closes every replica's stream (a node being demoted calls it
// before it follows its new primary; with Serving false, they cannot come
// back).
func (p *Primary) Disconnect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range p.replicas {
		r.conn.Close()
	}
}

// Register adds the SYNC command to s.
func (p *Primary) Register(s *bus.Server) { s.Handle("SYNC", p.serveSync) }

// ReplicaStatus is one connected replica, for INFO.
type ReplicaStatus struct {
	// Addr is what the replica announced (host:port), or its remote address.
	Addr string
	// Online is false while the replica is receiving a snapshot.
	Online bool
	// AckOffset is the offset the replica last acknowledged.
	AckOffset int64
	LastAck   time.Time
}

// Replicas lists the connected replicas, sorted by address.
func (p *Primary) Replicas() []ReplicaStatus {
	p.mu.Lock()
	out := make([]ReplicaStatus, 0, len(p.replicas))
	for r := range p.replicas {
		out = append(out, ReplicaStatus{Addr: r.name, Online: r.online.Load(), AckOffset: r.ack.Load(),
			LastAck: time.UnixMilli(r.lastAck.Load())})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b ReplicaStatus) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// Acked returns the offset each online replica acknowledged, by the
// address it announced (what failover.Handover waits on).
func (p *Primary) Acked() map[string]int64 {
	out := map[string]int64{}
	for _, r := range p.Replicas() {
		if r.Online {
			out[r.Addr] = r.AckOffset
		}
	}
	return out
}

// serveSync handles SYNC <replid> <offset> [announced-addr]. It replies
// +CONTINUE <replid> and streams from offset when the backlog still holds
// it under the same replid, else +FULLRESYNC <replid> <offset>, a snapshot
// and the stream from that offset. The connection then belongs to the
// stream until either side drops it.
func (p *Primary) serveSync(c *bus.Conn, args [][]byte) {
	if len(args) < 3 || len(args) > 4 {
		c.W.Error("ERR wrong number of arguments for 'sync' command")
		return
	}
	want, err := strconv.ParseInt(string(args[2]), 10, 64)
	if err != nil {
		c.W.Error("ERR value is not an integer or out of range")
		return
	}
	if p.cfg.Serving != nil && !p.cfg.Serving() {
		c.W.Error("ERR this node is a replica: it does not serve SYNC")
		c.Flush()
		return
	}
	r := &replica{conn: c, name: c.RemoteAddr().String()}
	if len(args) == 4 && len(args[3]) > 0 {
		r.name = string(args[3])
	}
	r.lastAck.Store(time.Now().UnixMilli())
	feed := p.cfg.Feed
	feed.Activate() // before the snapshot's offset is read
	replid, _ := feed.Position()
	start, end := feed.Backlog()
	full := string(args[1]) != replid || want < start || want > end
	off := want
	log := p.log.With("replica", r.name)
	if full {
		replid, off = feed.Position()
		c.W.Simple("FULLRESYNC " + replid + " " + strconv.FormatInt(off, 10))
		p.m.fullSyncs.WithLabelValues("primary").Inc()
		log.Info("repl: full resync", "replid", replid, "offset", off, "asked", string(args[1])+" "+string(args[2]))
	} else {
		c.W.Simple("CONTINUE " + replid)
		p.m.partial.WithLabelValues("primary").Inc()
		log.Info("repl: partial resync", "offset", off)
	}
	if err := c.Flush(); err != nil {
		return
	}

	ctx, cancel := context.WithCancel(c.Context())
	defer cancel()
	acks := make(chan struct{})
	var ackErr error // why the ack reader stopped; read after acks closes
	go func() {
		defer close(acks)
		defer cancel()
		ackErr = p.readAcks(c, r)
	}()
	defer func() { c.Close(); <-acks }()
	p.mu.Lock()
	p.replicas[r] = struct{}{}
	p.m.connected.Set(float64(len(p.replicas)))
	p.mu.Unlock()
	if p.cfg.Serving != nil && !p.cfg.Serving() { // demoted meanwhile: Disconnect may have missed it
		return
	}
	defer func() {
		p.mu.Lock()
		delete(p.replicas, r)
		p.m.connected.Set(float64(len(p.replicas)))
		p.mu.Unlock()
		p.m.lag.DeleteLabelValues(r.name)
	}()

	if full {
		t0 := time.Now()
		n, bytes, err := p.sendSnapshot(ctx, c)
		if err != nil {
			log.Warn("repl: snapshot not sent", "err", err)
			return
		}
		log.Info("repl: snapshot sent", "keys", n, "bytes", bytes, "took", time.Since(t0).Round(time.Millisecond))
	}
	r.online.Store(true)
	err = p.stream(ctx, c, r, off)
	c.Close()
	<-acks
	if ctx.Err() != nil && ackErr != nil {
		err = ackErr // the ack reader ended the stream
	}
	switch {
	case errors.Is(err, ErrBehind):
		log.Warn("repl: replica fell out of the backlog; it must full-sync", "offset", off)
	case c.Context().Err() != nil:
		// the node is stopping
	case errors.Is(err, io.EOF):
		log.Info("repl: replica disconnected")
	default:
		log.Warn("repl: replica link lost", "err", err)
	}
}

// readAcks reads REPLCONF ACK <offset> until the connection fails or the
// replica is silent past Timeout.
func (p *Primary) readAcks(c *bus.Conn, r *replica) error {
	for {
		args, err := c.ReadCommand(p.cfg.Timeout)
		if err != nil {
			return err
		}
		if len(args) == 3 && strings.EqualFold(string(args[0]), "replconf") && strings.EqualFold(string(args[1]), "ack") {
			if n, err := strconv.ParseInt(string(args[2]), 10, 64); err == nil {
				r.ack.Store(n)
				r.lastAck.Store(time.Now().UnixMilli())
				p.m.lag.WithLabelValues(r.name).Set(float64(max(0, p.cfg.Feed.Offset()-n)))
			}
		}
	}
}

// snapshotFrame is how many bytes of records a snapshot frame collects
// before it is sent (a frame always holds whole records).
const snapshotFrame = 256 << 10

// sendSnapshot sends every namespace, one lock shard at a time: under the
// shard's lock it reads the feed offset O_s and encodes the shard's
// entries, then sends them after unlocking. The replica skips stream
// records for that shard that start before O_s.
func (p *Primary) sendSnapshot(ctx context.Context, c *bus.Conn) (keys, bytes int64, err error) {
	var (
		frames []byte // encoded frames of the current shard
		recs   []byte // records not yet framed
	)
	for _, ns := range p.cfg.Registry.All() {
		db := ns.DB
		for i := range db.NumShards() {
			frames, recs = frames[:0], recs[:0]
			db.ViewShard(i, func(entries iter.Seq2[string, *keyspace.Entry]) {
				var hdr []byte
				hdr = binary.AppendUvarint(hdr, uint64(len(ns.Name)))
				hdr = append(hdr, ns.Name...)
				hdr = binary.AppendUvarint(hdr, uint64(i))
				hdr = binary.AppendUvarint(hdr, uint64(db.NumShards()))
				hdr = binary.AppendUvarint(hdr, uint64(p.cfg.Feed.Offset()))
				frames = appendFrame(frames, frameShard, hdr)
				for k, e := range entries {
					recs = dump.AppendRecord(recs, dump.OpSet, ns.Name, unsafe.Slice(unsafe.StringData(k), len(k)), e)
					keys++
					if len(recs) >= snapshotFrame {
						frames = appendFrame(frames, frameSnapshot, recs)
						recs = recs[:0]
					}
				}
				if len(recs) > 0 {
					frames = appendFrame(frames, frameSnapshot, recs)
				}
			})
			if err := ctx.Err(); err != nil {
				return keys, bytes, err
			}
			if _, err := c.Write(frames); err != nil {
				return keys, bytes, err
			}
			bytes += int64(len(frames))
			if cap(frames) > 16<<20 {
				frames, recs = nil, nil
			}
		}
	}
	_, err = c.Write(appendFrame(nil, frameEnd, nil))
	return keys, bytes, err
}

// streamChunk is the most backlog bytes one data frame carries.
const streamChunk = 256 << 10

// stream sends the feed from off on, with a ping every PingInterval.
func (p *Primary) stream(ctx context.Context, c *bus.Conn, r *replica, off int64) error {
	feed := p.cfg.Feed
	buf := make([]byte, frameHeaderRoom+streamChunk)
	lastPing := time.Time{}
	for {
		if time.Since(lastPing) >= p.cfg.PingInterval {
			ping := appendFrame(nil, framePing, binary.AppendUvarint(nil, uint64(feed.Offset())))
			if _, err := c.Write(ping); err != nil {
				return err
			}
			lastPing = time.Now()
			if time.Since(time.UnixMilli(r.lastAck.Load())) > p.cfg.Timeout {
				return fmt.Errorf("no ack for %v", p.cfg.Timeout)
			}
		}
		n, err := feed.ReadAt(buf[frameHeaderRoom:], off)
		if err != nil {
			return err
		}
		if n > 0 {
			at := putFrameHeader(buf, frameData, n)
			if _, err := c.Write(buf[at : frameHeaderRoom+n]); err != nil {
				return err
			}
			off += int64(n)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, p.cfg.PingInterval-time.Since(lastPing))
		err = feed.Wait(wctx, off)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// hostPort splits an announced address for INFO's ip= and port=.
func hostPort(addr string) (string, string) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, "0"
	}
	return h, p
}
