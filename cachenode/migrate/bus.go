package migrate

import (
	"context"
	"strconv"
	"sync"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/namespace"
)

// ImportCommand is the bus command carrying one batch: IMPORT <records>.
const ImportCommand = "IMPORT"

// BusSender sends batches over the bus port, one kept connection per
// target; a failed connection is dropped and redialled by the next batch.
type BusSender struct {
	// Bus is how batches reach the targets' bus ports (TLS, secret).
	Bus bus.Peer

	mu    sync.Mutex
	conns map[string]*bus.Client
}

// Send is a Sender.
func (s *BusSender) Send(ctx context.Context, addr string, batch []byte) error {
	s.mu.Lock()
	c := s.conns[addr]
	delete(s.conns, addr) // one batch at a time per connection
	s.mu.Unlock()
	if c == nil {
		var err error
		if c, err = s.Bus.Dial(ctx, addr); err != nil {
			return err
		}
	}
	if _, err := c.Do(ctx, []byte(ImportCommand), batch); err != nil {
		c.Close()
		return err
	}
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[string]*bus.Client{}
	}
	if old := s.conns[addr]; old != nil {
		old.Close()
	}
	s.conns[addr] = c
	s.mu.Unlock()
	return nil
}

// Close closes the kept connections.
func (s *BusSender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, c := range s.conns {
		c.Close()
		delete(s.conns, a)
	}
}

// ImportHandler is the target's IMPORT handler: it applies the batch
// (Import, which calls stored per key) and replies +OK, or an error
// naming why nothing was applied.
func ImportHandler(st *cluster.State, reg *namespace.Registry, stored func(ns string, key []byte)) bus.Handler {
	return func(c *bus.Conn, args [][]byte) {
		if len(args) != 2 {
			c.W.Error("ERR wrong number of arguments for 'import' command")
		} else if n, err := Import(st, reg, args[1], reg.Now(), stored); err != nil {
			c.W.Error("ERR import failed after " + strconv.Itoa(n) + " records: " + err.Error())
		} else {
			c.W.OK()
		}
		c.Flush()
	}
}
