package repl

import (
	"strconv"
	"strings"
	"time"
)

// Info returns the INFO replication section's fields as "name:value\r\n"
// lines, with Redis's names. p or fol may be nil (a node without a bus
// port, or one that never follows). While following, master_host and
// master_port are the primary's bus address, and master_replid and
// master_repl_offset are the primary's id and the offset applied, as on a
// Redis replica; otherwise they are this node's own.
func Info(feed *Feed, p *Primary, fol *Follower) string {
	var b strings.Builder
	kv := func(k, v string) {
		b.WriteString(k)
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteString("\r\n")
	}
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	var st FollowerStatus
	if fol != nil {
		st = fol.Status()
	}
	var replicas []ReplicaStatus
	if p != nil {
		replicas = p.Replicas()
	}
	replid, off := feed.Position()
	if st.Primary != "" {
		kv("role", "slave")
		host, port := hostPort(st.Primary)
		kv("master_host", host)
		kv("master_port", port)
		link, ago := "down", int64(-1)
		if st.LinkUp {
			link = "up"
		}
		if !st.LastIO.IsZero() {
			ago = int64(time.Since(st.LastIO) / time.Second)
		}
		kv("master_link_status", link)
		kv("master_last_io_seconds_ago", i64(ago))
		sync := "0"
		if st.Syncing {
			sync = "1"
		}
		kv("master_sync_in_progress", sync)
		kv("slave_read_repl_offset", i64(st.Offset))
		kv("slave_repl_offset", i64(st.Offset))
		kv("slave_read_only", "1")
		kv("replica_full_syncs", i64(st.FullSyncs))
		kv("replica_partial_syncs", i64(st.PartialSyncs))
		replid, off = st.ReplID, st.Offset
	} else {
		kv("role", "master")
	}
	kv("connected_slaves", strconv.Itoa(len(replicas)))
	myOff := feed.Offset()
	for i, r := range replicas {
		host, port := hostPort(r.Addr)
		state := "wait_bgsave"
		if r.Online {
			state = "online"
		}
		lag := int64(time.Since(r.LastAck) / time.Second)
		kv("slave"+strconv.Itoa(i), "ip="+host+",port="+port+",state="+state+",offset="+i64(r.AckOffset)+
			",lag="+i64(lag)+",lag_bytes="+i64(max(0, myOff-r.AckOffset)))
	}
	kv("master_replid", replid)
	kv("master_repl_offset", i64(off))
	start, end := feed.Backlog()
	kv("repl_backlog_active", "1")
	kv("repl_backlog_size", strconv.Itoa(feed.size))
	kv("repl_backlog_first_byte_offset", i64(start))
	kv("repl_backlog_histlen", i64(end-start))
	return b.String()
}
