//go:build linux

package server

import (
	"errors"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/portico-io/portico/cachenode/resp"
)

// A loop serves many plaintext connections from one goroutine, as Redis's
// event loop does: it owns an epoll instance holding their sockets, serves
// every socket that instance reports ready (read, run the commands, write
// the replies, with rawIO's raw calls), and waits only when none is: in
// epoll_pwait itself when the process has more Ps than loops, else parked
// in Go's network poller on the epoll instance's own descriptor.
//
// Why: with a goroutine per connection every request is a goroutine
// readied by the poller and scheduled, and with more than one P the
// runtime hands the readied goroutines to idle Ps: a futex wake, a
// spinning thread and a context switch each time. Measured under
// redis-benchmark -c 50 -P 1 SET at GOMAXPROCS=2: runtime.schedule 20 %
// of the node's CPU (13 % at GOMAXPROCS=1), 7 500 futex calls and 1 000
// sched_yield per 200k requests (350 and 1 at GOMAXPROCS=1), so 15-20 %
// more CPU per request than at GOMAXPROCS=1. A loop is readied once per
// batch of ready sockets instead of once per request.
//
// Why two ways to wait: Go's poller registers a descriptor edge-triggered,
// and a nested epoll instance signals it on every arrival on any of its
// sockets, busy loop or not. With a P idle, its thread waits in the poller
// and was woken for each: 9,290 voluntary context switches per 800k
// pipelined ZADDs against redis-server's 37, and up to 15 % more CPU (7 %
// summed over 6 alternating rounds) than a loop that waits in epoll_pwait,
// its instance then outside the poller. But a
// loop blocked in a system call keeps its P until sysmon takes it back (up
// to 10 ms when the process was idle): harmless while other Ps are free,
// a stall for TLS connections and timers when every P has a loop (the
// default at GOMAXPROCS=1), where no P is idle to be woken anyway.
//
// Server.Serve runs Config.Loops of them (one per two Ps by default,
// DefaultLoops) and deals accepted connections out in turn, past a loop
// that is stuck in one command or has ended (pickLoop). A connection in
// a blocking command (BLPOP) stays on its loop, parked: the loop reads what
// it sends meanwhile without running it, and the command's completion
// (Session.Wake, from the pushing connection or the timeout) queues it on
// the loop and signals the loop's eventfd; the loop then writes the reply
// and runs the rest of its pipeline, as Redis serves a blocked client in
// its event loop. Whatever else would make a loop wait moves that
// connection to a goroutine of its own (rawLoop, the path TLS connections
// take): replies the socket has no room for (a client that does not
// read), a script or EXEC (runsLong). It stays there until it closes.
type loop struct {
	s    *Server
	tr   *tracker
	epfd int // the epoll instance; the loop closes it (closeAll)
	// f and rc are the instance in Go's poller when the loop waits there
	// (waitInPoller); nil when it waits in epoll_pwait.
	f      *os.File
	rc     syscall.RawConn
	events [128]syscall.EpollEvent

	stopping atomic.Bool
	// busySince is when the loop began running a connection's commands
	// (UnixNano; 0 between them), and dead is set when it ended on an
	// error: Serve deals new connections past a loop that is stuck in one
	// command or gone (stuck).
	busySince atomic.Int64
	dead      atomic.Bool
	efd       int // eventfd in the epoll instance: woken has connections, or stop; -1 once closed (under mu)
	mu        sync.Mutex
	stopped   bool        // no more adds: the epoll instance is closing
	added     []*loopConn // added by Serve, not yet in conns
	woken     []*loopConn // parked connections whose blocking command completed
	spare     []*loopConn // the loop's: woken's last array, for reuse
	signaled  bool        // efd was written since the loop last took woken

	// The loop goroutine's own.
	waitErr   syscall.Errno // epoll_pwait failed: the loop ends
	conns     []*loopConn   // by descriptor
	n         int           // conns not nil
	nextSweep time.Time
	nextIdle  time.Time
}

// loopConn is a connection a loop serves, and its closer (tracker,
// CLIENT KILL) from any goroutine.
type loopConn struct {
	c  *conn
	rw *rawIO
	l  *loop
	fd int32 // the loop's own descriptor of the socket (a dup of the accepted one)
	// parked: in a blocking command, waiting on the loop; ending: moved
	// only to write its last replies (the loop's own, then its goroutine's)
	parked, ending bool

	mu     sync.Mutex
	closed bool     // fd is closed
	nc     *os.File // fd in Go's poller, once the connection's own goroutine serves it (moved)
}

// startLoops starts Config.Loops loops on tr's wait group; none when it
// is negative or an epoll instance cannot be made.
func (s *Server) startLoops(tr *tracker) []*loop {
	var loops []*loop
	// Chosen once: a GOMAXPROCS changed later (a new cgroup limit) leaves
	// the loops waiting as chosen, which costs latency, not correctness.
	inPoller := waitInPoller(s.cfg.Loops, runtime.GOMAXPROCS(0), s.cfg.loopWait)
	for range s.cfg.Loops {
		l, err := newLoop(s, tr, inPoller)
		if err != nil {
			s.cfg.Logger.Warn("server: event loop unavailable, a goroutine per connection", "err", err)
			for _, l := range loops {
				l.closeAll() // not started: its instance and eventfd
			}
			return nil
		}
		loops = append(loops, l)
	}
	for _, l := range loops {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			l.run()
		}()
	}
	return loops
}

// waitInPoller reports whether loops wait in Go's poller: when every P
// has a loop (see loop), or when forced (Config.loopWait).
func waitInPoller(loops, procs, forced int) bool {
	if forced != 0 {
		return forced == loopWaitPoller
	}
	return loops >= procs
}

// newLoop makes a loop's epoll instance and eventfd; inPoller puts the
// instance in Go's poller (waitInPoller).
func newLoop(s *Server, tr *tracker, inPoller bool) (*loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &loop{s: s, tr: tr, epfd: epfd, efd: -1}
	if inPoller {
		// Nonblocking, so that os.NewFile registers it in the poller (an
		// epoll descriptor is readable while its instance has events).
		if err := syscall.SetNonblock(epfd, true); err != nil {
			_ = syscall.Close(epfd)
			return nil, err
		}
		l.f = os.NewFile(uintptr(epfd), "epoll")
		l.rc, err = l.f.SyscallConn()
		if err == nil {
			err = l.f.SetReadDeadline(time.Time{}) // fails unless the poller has it
		}
		if err != nil {
			_ = l.f.Close()
			return nil, err
		}
	}
	efd, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		l.closeEpoll()
		return nil, e
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(efd)}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(efd), &ev); err != nil {
		_ = syscall.Close(int(efd))
		l.closeEpoll()
		return nil, err
	}
	l.efd = int(efd)
	now := time.Now()
	l.nextSweep, l.nextIdle = now.Add(s.cfg.IdleCheck), now.Add(s.cfg.IdleCheck)
	return l, nil
}

// closeEpoll closes the epoll instance (through f when the poller has it).
func (l *loop) closeEpoll() {
	if l.f != nil {
		_ = l.f.Close()
	} else {
		_ = syscall.Close(l.epfd)
	}
}

// stuckAfter is how long a loop may run one connection's commands before
// Serve stops dealing it new connections: far above a command's normal
// time, well below a client's patience.
const stuckAfter = 50 * time.Millisecond

// stuck reports whether new connections should not be dealt to l: it is
// gone, or waiting in one command (a key a script past its time limit
// holds) that the connections of a new client must not queue behind.
func (l *loop) stuck(now time.Time) bool {
	if l.dead.Load() {
		return true
	}
	t := l.busySince.Load()
	return t != 0 && now.UnixNano()-t > int64(stuckAfter)
}

// pickLoop returns the next loop (round robin from *next) that is not
// stuck, or nil when every one is (the connection gets a goroutine).
func pickLoop(loops []*loop, next *int) *loop {
	if len(loops) == 0 {
		return nil
	}
	now := time.Now()
	for range loops {
		l := loops[*next]
		*next = (*next + 1) % len(loops)
		if !l.stuck(now) {
			return l
		}
	}
	return nil
}

// stop makes the loop close its connections and end.
func (l *loop) stop() {
	l.stopping.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.efd >= 0 { // the loop's wait returns, in either mode
		one := uint64(1)
		_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.efd), uintptr(unsafe.Pointer(&one)), 8)
	}
}

// serveInLoop hands nc to l; false when nc is not a plain TCP connection
// (the caller serves it in a goroutine). nc itself is closed: the loop
// keeps a duplicate of its socket, out of Go's poller, which would
// otherwise report every arrival a second time.
func (s *Server) serveInLoop(l *loop, nc net.Conn, tr *tracker) bool {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	if cerr := rc.Control(func(sfd uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, sfd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			err = e
			return
		}
		fd = int(r)
	}); cerr != nil || err != nil {
		return false
	}
	eng := s.cfg.Engine
	c := &conn{s: s, eng: eng, sess: eng.NewSession(nc.RemoteAddr().String())}
	c.sess.LAddr = nc.LocalAddr().String()
	lc := &loopConn{c: c, l: l, fd: int32(fd)}
	rw := &rawIO{fd: uintptr(fd)}
	rw.writeFn = rw.write
	lc.rw = rw
	c.rd = resp.NewReader(rw, s.cfg.Limits)
	c.out = rw
	c.stalled = func() bool { return len(rw.pending) > 0 }
	c.nowMs = time.Now().UnixMilli()
	c.sess.CanBlock = true
	c.sess.Wake = lc.wake
	eng.Attach(c.sess, func() { _ = lc.Close() })
	if !tr.add(lc) { // the server is closing
		lc.closeFD()
		_ = nc.Close()
		s.endConn(c)
		return true
	}
	if !l.add(lc) {
		// The loop stopped, or epoll_ctl failed (ENOSPC past
		// fs.epoll.max_user_watches, ENOMEM): nc is still whole and gets a
		// goroutine of its own (the caller counts it as a client still).
		tr.remove(lc)
		lc.closeFD()
		eng.Close(c.sess)
		return false
	}
	_ = nc.Close()
	return true
}

// add registers lc's socket with the loop (level-triggered: a socket is
// reported while it has input or its end); false when the loop stopped.
func (l *loop) add(lc *loopConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	l.added = append(l.added, lc)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: lc.fd}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, int(lc.fd), &ev); err != nil {
		l.added = l.added[:len(l.added)-1]
		return false
	}
	return true
}

// takeAdded moves the connections Serve added into conns.
func (l *loop) takeAdded() {
	l.mu.Lock()
	added := l.added
	l.added = nil
	l.mu.Unlock()
	for _, lc := range added {
		for int(lc.fd) >= len(l.conns) {
			l.conns = append(l.conns, make([]*loopConn, len(l.conns)+64)...)
		}
		l.conns[lc.fd] = lc
		l.n++
	}
}

// run serves the loop's connections until stop, then closes them.
func (l *loop) run() {
	defer l.closeAll()
	defer func() {
		if !l.stopping.Load() {
			l.dead.Store(true)
			l.s.cfg.Logger.Error("server: an event loop ended; its connections are closed, new ones get a goroutine each", "err", l.waitErr)
		}
	}()
	if l.rc != nil {
		l.waitInPoller()
	} else {
		l.waitInSyscall()
	}
}

// waitInSyscall serves until stop, waiting in epoll_pwait (Config.Loops'
// mode when there are more Ps than loops).
func (l *loop) waitInSyscall() {
	epfd := uintptr(l.epfd)
	for !l.stopping.Load() {
		// Syscall6, not RawSyscall6: a wait that blocks lets sysmon hand
		// the P to other goroutines. With events ready it returns at once.
		n, _, e := syscall.Syscall6(syscall.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), uintptr(l.waitMs()), 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			l.waitErr = e // cannot wait any more: end the loop
			return
		}
		if l.stopping.Load() {
			return
		}
		for i := range int(n) {
			l.serveEvent(&l.events[i], epfd) // level-triggered: what is left is reported again
		}
		if !time.Now().Before(l.nextSweep) {
			l.sweep(epfd)
		}
	}
}

// waitInPoller serves until stop, parking in Go's poller on the epoll
// descriptor when no socket is ready (the mode when every P has a loop:
// a loop blocked in a system call would hold the only P from the other
// goroutines until sysmon takes it back, up to 10 ms).
func (l *loop) waitInPoller() {
	// Runs with the epoll descriptor held open: until the instance has no
	// event, or a sweep is due, or the loop stops (then true).
	serve := func(epfd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				l.waitErr = e // cannot wait any more: end the loop
				return true
			}
			if l.stopping.Load() {
				return true
			}
			if n == 0 {
				return false // park in the poller until an event
			}
			again := int(n) == len(l.events)
			for i := range int(n) {
				if l.serveEvent(&l.events[i], epfd) {
					again = true
				}
			}
			// stop's eventfd write may have been read by serveWoken
			// above, so its wakeup is gone: look before parking.
			if l.stopping.Load() || !time.Now().Before(l.nextSweep) {
				return true
			}
			if !again {
				// Every reported socket was read dry: input that arrives
				// from now on raises an event on the instance, and so on
				// its descriptor in the poller (edge-triggered there), as
				// for rawIO's connections. No second wait to find none.
				return false
			}
		}
	}
	for !l.stopping.Load() {
		if l.f.SetReadDeadline(l.nextSweep) != nil {
			return
		}
		if err := l.rc.Read(serve); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if l.stopping.Load() || l.waitErr != 0 || l.rc.Control(l.sweep) != nil {
			return
		}
	}
}

// waitMs is how long a wait may block: until the next sweep, rounded up.
func (l *loop) waitMs() int {
	d := time.Until(l.nextSweep)
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Millisecond-1)/time.Millisecond, math.MaxInt32)) // epoll's timeout is a C int
}

// serveEvent serves the connection of ev; true when its socket may hold
// input no later event will announce: the read filled the buffer, or the
// peer's end came with the data (the next read sees it).
func (l *loop) serveEvent(ev *syscall.EpollEvent, epfd uintptr) bool {
	fd := int(ev.Fd)
	if fd == l.efd {
		l.serveWoken(epfd)
		return false
	}
	if fd >= len(l.conns) || l.conns[fd] == nil {
		l.takeAdded()
		if fd >= len(l.conns) || l.conns[fd] == nil {
			return false // closed since
		}
	}
	lc := l.conns[fd]
	c, rw := lc.c, lc.rw
	err := c.rd.Fill()
	if errors.Is(err, errWouldBlock) {
		return false
	}
	if err != nil {
		c.fillFailed(err)
		l.close(lc, epfd)
		return false
	}
	if !lc.parked {
		c.nowMs, c.sinceClock = time.Now().UnixMilli(), 0
		if !l.runConn(lc, epfd) {
			return false
		}
	}
	// The instance is level-triggered: a socket with input left (or its
	// end) is reported again by the next wait, after the other ready
	// connections. A parked connection's input waits in its buffer, as
	// Redis keeps a blocked client's.
	return rw.full || ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
}

// runConn runs the commands in lc's buffer, then parks lc if it is left in
// a blocking command, or moves it if it must wait otherwise; false when lc
// left the loop (closed or moved).
func (l *loop) runConn(lc *loopConn, epfd uintptr) bool {
	c := lc.c
	for {
		l.busySince.Store(time.Now().UnixNano())
		ok := c.run()
		l.busySince.Store(0)
		if !ok {
			l.end(lc, epfd)
			return false
		}
		if len(lc.rw.pending) > 0 || c.held != nil {
			l.move(lc, epfd)
			return false
		}
		if !c.sess.Blocked() {
			return true
		}
		if c.eng.ArmWait(c.sess, func() { lc.parked = true }) {
			return true // serveWoken resumes it
		}
		// Completed already (a push on another loop): its reply, then
		// the rest of the pipeline.
		if !c.unblocked() {
			l.end(lc, epfd)
			return false
		}
	}
}

// serveWoken resumes the parked connections whose blocking command
// completed: each gets its reply and runs the rest of its pipeline.
func (l *loop) serveWoken(epfd uintptr) {
	var n [8]byte
	_, _, _ = syscall.RawSyscall(syscall.SYS_READ, uintptr(l.efd), uintptr(unsafe.Pointer(&n[0])), 8)
	l.mu.Lock()
	woken := l.woken
	l.woken, l.signaled = l.spare[:0], false
	l.mu.Unlock()
	for i, lc := range woken {
		woken[i] = nil
		if !lc.parked || int(lc.fd) >= len(l.conns) || l.conns[lc.fd] != lc {
			continue // closed since, or a wake before it parked
		}
		c := lc.c
		if c.eng.ArmWait(c.sess, func() {}) {
			continue // not completed (a wake of an earlier command)
		}
		lc.parked = false
		if !c.unblocked() {
			l.end(lc, epfd)
			continue
		}
		l.runConn(lc, epfd)
	}
	l.spare = woken[:0]
}

// post queues lc, whose blocking command completed, for its loop.
func (l *loop) post(lc *loopConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return // closeAll ends lc
	}
	l.woken = append(l.woken, lc)
	if !l.signaled {
		l.signaled = true
		one := uint64(1)
		_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.efd), uintptr(unsafe.Pointer(&one)), 8)
	}
}

// forget takes lc off the loop (the loop's goroutine: epfd is open).
func (l *loop) forget(lc *loopConn, epfd uintptr) {
	_ = syscall.EpollCtl(int(epfd), syscall.EPOLL_CTL_DEL, int(lc.fd), nil)
	l.conns[lc.fd] = nil
	l.n--
}

// end closes lc after its last replies (QUIT's, a protocol error's,
// -UNBLOCKED's): what its socket had no room for is written by a goroutine
// of its own first, as a moved connection's pending replies are.
func (l *loop) end(lc *loopConn, epfd uintptr) {
	if len(lc.rw.pending) == 0 {
		l.close(lc, epfd)
		return
	}
	lc.ending = true
	l.move(lc, epfd)
}

func (l *loop) close(lc *loopConn, epfd uintptr) {
	l.forget(lc, epfd)
	lc.closeFD()
	l.tr.remove(lc)
	l.s.endConn(lc.c)
}

// move hands lc to a goroutine of its own (rawLoop), which writes its
// pending replies, runs the commands left in its buffer and waits for
// what made it leave the loop.
//
// The socket enters Go's poller as the descriptor it is (os.NewFile
// registers a nonblocking descriptor): no duplicate, so a process at its
// descriptor limit (EMFILE) still moves its connections.
func (l *loop) move(lc *loopConn, epfd uintptr) {
	l.forget(lc, epfd)
	lc.mu.Lock()
	var nc *os.File
	if !lc.closed {
		nc = os.NewFile(uintptr(lc.fd), "")
		lc.closed = true // nc owns fd from now on
		lc.nc = nc
	}
	lc.mu.Unlock()
	if nc == nil { // closed by Serve ending meanwhile
		l.tr.remove(lc)
		l.s.endConn(lc.c)
		return
	}
	l.tr.wg.Add(1)
	go func() {
		defer l.tr.wg.Done()
		l.s.serveMoved(nc, lc)
		l.tr.remove(lc)
	}()
}

// serveMoved serves a connection that left an event loop until it ends.
func (s *Server) serveMoved(nc *os.File, lc *loopConn) {
	defer func() {
		_ = nc.Close()
		s.endConn(lc.c)
	}()
	if s.closing.Load() {
		return
	}
	rc, err := nc.SyscallConn()
	if err == nil {
		// A descriptor the poller could not take (epoll_ctl: ENOMEM, or
		// ENOSPC past fs.epoll.max_user_watches) has no deadlines.
		err = nc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		s.cfg.Logger.Warn("server: closing a client that left its event loop: its socket cannot wait in Go's poller", "addr", lc.c.sess.Addr, "err", err)
		return
	}
	rw := lc.rw
	rw.rc, rw.fd = rc, noFD // set inside rc's callbacks only
	lc.c.stalled = nil      // a goroutine's connection from now on
	if len(rw.pending) > 0 {
		rw.p, rw.n, rw.err = rw.pending, 0, nil
		err := rc.Write(rw.writeFn)
		rw.p, rw.pending = nil, nil
		if err != nil || rw.err != nil || lc.ending {
			return
		}
	}
	s.rawLoop(nc, rw, lc.c, true)
}

// sweep, every IdleCheck and at the earliest CONFIG SET timeout, closes
// the connections idle past the timeout and gives back the buffers of
// those that sent nothing for a whole IdleCheck (rawLoop's deadline does
// both for a goroutine's connection).
func (l *loop) sweep(epfd uintptr) {
	l.takeAdded()
	now := time.Now()
	idlePass := !now.Before(l.nextIdle)
	if idlePass {
		l.nextIdle = now.Add(l.s.cfg.IdleCheck)
	}
	next := l.nextIdle
	timeout := l.s.cfg.Engine.IdleTimeout()
	for _, lc := range l.conns {
		if lc == nil || lc.parked {
			continue // a blocked client has its command's timeout, not the idle one (Redis)
		}
		if timeout > 0 {
			d := time.UnixMilli(lc.c.nowMs).Add(timeout)
			if !now.Before(d) {
				l.close(lc, epfd)
				continue
			}
			if d.Before(next) {
				next = d
			}
		}
		if idlePass {
			if !lc.rw.active {
				lc.c.idle()
			}
			lc.rw.active = false
		}
	}
	l.nextSweep = next
}

// closeAll closes every connection of a stopped loop.
func (l *loop) closeAll() {
	l.mu.Lock()
	l.stopped = true
	l.woken = nil
	_ = syscall.Close(l.efd) // under mu: post and stop write it under mu
	l.efd = -1
	l.mu.Unlock()
	l.closeEpoll()
	l.takeAdded()
	for _, lc := range l.conns {
		if lc != nil {
			lc.closeFD()
			l.tr.remove(lc)
			l.s.endConn(lc.c)
		}
	}
	l.conns, l.n = nil, 0
}

func (lc *loopConn) closeFD() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !lc.closed {
		lc.closed = true
		_ = syscall.Close(int(lc.fd))
	}
}

// Close ends the connection from any goroutine (CLIENT KILL, Serve
// ending) with a shutdown: the loop, or a moved connection's goroutine,
// reads the end and closes it. Never a close here: closing a moved
// connection's file waits for its goroutine to leave the poller's
// callback, and two connections killing each other from inside theirs
// waited for each other forever.
func (lc *loopConn) Close() error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.nc != nil {
		return shutdown(lc.nc)
	}
	if !lc.closed {
		return syscall.Shutdown(int(lc.fd), syscall.SHUT_RDWR)
	}
	return nil
}

// wake is Session.Wake: a moved connection's goroutine waits in a read
// the past deadline interrupts; a parked one, on its loop, which post
// signals. A wake before the command parked finds it not parked (ArmWait
// then sees the command done).
func (lc *loopConn) wake() {
	lc.mu.Lock()
	nc := lc.nc
	lc.mu.Unlock()
	if nc != nil {
		_ = nc.SetReadDeadline(aLongTimeAgo)
		return
	}
	lc.l.post(lc)
}
