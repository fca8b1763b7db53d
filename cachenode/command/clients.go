package command

import (
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The connected clients as the CLIENT subcommands that act across
// connections see them: LIST, KILL and UNBLOCK, with Redis 7.0's filters,
// replies and errors (networking.c). A server attaches each connection's
// session with a way to close it (Engine.Attach); a session never
// attached is only its own CLIENT INFO/ID.
//
// Another connection reads a session's name, library, protocol and
// namespace under Session.info, which the session's own goroutine holds
// when it changes them (it reads them without it: it is their only
// writer). There is no idle time or last command per client: keeping
// them would cost every command a synchronized store.

const (
	errClientID       = "ERR client-id should be greater than 0"
	errNoSuchClient   = "ERR No such client"
	errInvalidID      = "ERR Invalid client ID"
	errUnblockReason  = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
	errUnblockedByCmd = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
)

// clientRegistry is an Engine's attached sessions.
type clientRegistry struct {
	mu   sync.Mutex
	byID map[int64]*Session
}

// Attach lists s among the node's clients (CLIENT LIST, KILL, UNBLOCK)
// until Close; kill closes its connection from another goroutine (CLIENT
// KILL), and must make its server end the session. The server calls it
// once, after setting s's Addr and LAddr and before s runs a command.
func (e *Engine) Attach(s *Session, kill func()) {
	s.kill = kill
	r := &e.clients
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[int64]*Session{}
	}
	r.byID[s.ID] = s
}

func (e *Engine) detach(s *Session) {
	r := &e.clients
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, s.ID)
}

// sessions returns the attached sessions in ID order, plus self when it
// is not attached.
func (e *Engine) sessions(self *Session) []*Session {
	r := &e.clients
	r.mu.Lock()
	out := make([]*Session, 0, len(r.byID)+1)
	for _, s := range r.byID {
		out = append(out, s)
	}
	_, attached := r.byID[self.ID]
	r.mu.Unlock()
	if !attached {
		out = append(out, self)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (e *Engine) session(id int64) *Session {
	r := &e.clients
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// setInfo changes fields of the session that other connections read
// (CLIENT LIST): the session's own goroutine calls it.
func (s *Session) setInfo(f func()) {
	s.info.Lock()
	f()
	s.info.Unlock()
}

// clientLine is s's CLIENT LIST/INFO line, in Redis's field order for the
// fields this node has (namespace= is ours; user= names it too).
func (e *Engine) clientLine(s *Session, nowMs int64) string {
	s.info.Lock()
	name, lib, ver, proto, ns := s.Name, s.LibName, s.LibVer, s.Proto, s.NS.Name
	s.info.Unlock()
	flags := "N"
	if s.waiting.Load() != nil {
		flags = "b"
	}
	age := max(nowMs-s.created, 0) / 1000
	var b strings.Builder
	b.WriteString("id=" + strconv.FormatInt(s.ID, 10) + " addr=" + s.Addr + " laddr=" + s.LAddr + " name=" + name)
	b.WriteString(" age=" + strconv.FormatInt(age, 10) + " flags=" + flags + " db=0")
	b.WriteString(" user=" + ns + " resp=" + strconv.Itoa(proto) + " lib-name=" + lib + " lib-ver=" + ver + " namespace=" + ns)
	return b.String()
}

// clientType parses a CLIENT LIST/KILL TYPE: every client of this node is
// a normal one (replication runs on the bus port, and there is no
// pub/sub). ok=false: not a type Redis knows.
func clientType(b []byte) (normal, ok bool) {
	switch lower(b) {
	case "normal":
		return true, true
	case "master", "slave", "replica", "pubsub":
		return false, true
	}
	return false, false
}

func (c *Ctx) nowMs() int64 { return c.e.cfg.Now().UnixMilli() }

// clientList is CLIENT LIST [TYPE type | ID id...].
func clientList(c *Ctx) {
	var list []*Session
	switch {
	case len(c.Args) == 4 && eqFold(c.Args[2], "type"):
		normal, ok := clientType(c.Args[3])
		if !ok {
			c.W.Error("ERR Unknown client type '" + string(c.Args[3]) + "'")
			return
		}
		if normal {
			list = c.e.sessions(c.S)
		}
	case len(c.Args) > 3 && eqFold(c.Args[2], "id"):
		for _, a := range c.Args[3:] {
			id, ok := parseInt(a)
			if !ok {
				c.W.Error(errInvalidID)
				return
			}
			if s := c.e.session(id); s != nil {
				list = append(list, s)
			} else if id == c.S.ID {
				list = append(list, c.S)
			}
		}
	case len(c.Args) != 2:
		c.W.Error(errSyntax)
		return
	default:
		list = c.e.sessions(c.S)
	}
	now := c.nowMs()
	var b strings.Builder
	for _, s := range list {
		b.WriteString(c.e.clientLine(s, now))
		b.WriteByte('\n')
	}
	c.W.Verbatim(b.String())
}

// killFilter is CLIENT KILL's filters; zero fields match any client.
type killFilter struct {
	id         int64
	addr       string
	laddr      string
	user       string
	typeNone   bool // a TYPE no client of this node has
	skipme     bool
	haveAddr   bool
	haveLAddr  bool
	haveUser   bool
	legacyForm bool // CLIENT KILL addr:port
}

func (f *killFilter) match(self, s *Session) bool {
	if f.typeNone || (f.id != 0 && s.ID != f.id) || (f.haveAddr && s.Addr != f.addr) || (f.haveLAddr && s.LAddr != f.laddr) {
		return false
	}
	if f.haveUser {
		s.info.Lock()
		ns := s.NS.Name
		s.info.Unlock()
		if ns != f.user {
			return false
		}
	}
	return !(f.skipme && s == self)
}

// clientKill is CLIENT KILL addr:port (replies +OK or "No such client")
// and CLIENT KILL <filter value>... (replies the number killed; SKIPME
// defaults to yes). The killed connections close at once; the calling
// one, when it matches, closes after the reply.
func clientKill(c *Ctx) {
	f := killFilter{}
	switch {
	case len(c.Args) == 3:
		f = killFilter{addr: string(c.Args[2]), haveAddr: true, legacyForm: true}
	case len(c.Args) > 3 && len(c.Args)%2 == 0:
		f.skipme = true
		for i := 2; i < len(c.Args); i += 2 {
			v := c.Args[i+1]
			switch lower(c.Args[i]) {
			case "id":
				id, ok := parseInt(v)
				if !ok || id < 1 {
					c.W.Error(errClientID)
					return
				}
				f.id = id
			case "type":
				normal, ok := clientType(v)
				if !ok {
					c.W.Error("ERR Unknown client type '" + string(v) + "'")
					return
				}
				f.typeNone = !normal
			case "addr":
				f.addr, f.haveAddr = string(v), true
			case "laddr":
				f.laddr, f.haveLAddr = string(v), true
			case "user":
				if _, err := c.e.cfg.Registry.Get(string(v)); err != nil {
					c.W.Error("ERR No such user '" + string(v) + "'")
					return
				}
				f.user, f.haveUser = string(v), true
			case "skipme":
				switch lower(v) {
				case "yes":
					f.skipme = true
				case "no":
					f.skipme = false
				default:
					c.W.Error(errSyntax)
					return
				}
			default:
				c.W.Error(errSyntax)
				return
			}
		}
	default:
		c.W.Error(errSyntax)
		return
	}
	killed := int64(0)
	for _, s := range c.e.sessions(c.S) {
		if !f.match(c.S, s) {
			continue
		}
		killed++
		if s == c.S {
			c.S.Quit = true // after this reply, as Redis's CLIENT_CLOSE_AFTER_REPLY
			continue
		}
		// A blocked client leaves the wait queues now, as Redis frees it
		// at once: a push that follows must not hand its element to a
		// connection that is only closing.
		if w := s.waiting.Load(); w != nil {
			c.e.blk.claim(w)
		}
		if s.kill != nil {
			s.kill()
		}
	}
	if !f.legacyForm {
		c.W.Int(killed)
		return
	}
	if killed == 0 {
		c.W.Error(errNoSuchClient)
		return
	}
	c.W.OK()
}

// clientUnblock is CLIENT UNBLOCK id [TIMEOUT|ERROR]: the client blocked
// in a blocking command gets the timeout's reply (a null array) or
// -UNBLOCKED; 1 when it was blocked, else 0.
func clientUnblock(c *Ctx) {
	asError := false
	if len(c.Args) == 4 {
		switch lower(c.Args[3]) {
		case "timeout":
		case "error":
			asError = true
		default:
			c.W.Error(errUnblockReason)
			return
		}
	}
	id, ok := parseInt(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	s := c.e.session(id)
	if s == nil {
		c.W.Int(0)
		return
	}
	w := s.waiting.Load()
	if w == nil || !c.e.blk.claim(w) {
		c.W.Int(0)
		return
	}
	if asError {
		w.complete(errorReply(errUnblockedByCmd), false)
	} else {
		w.complete(nullReply(w.proto), false)
	}
	c.W.Int(1)
}
