package bus

import (
	"errors"
	"strings"
)

// Errors.
var (
	// ErrProtocol is a malformed reply.
	ErrProtocol = errors.New("bus: protocol error")
	// ErrClosed is returned by Serve when its context ends.
	ErrClosed = errors.New("bus: server closed")
)

// ReplyError is an error reply (-ERR ...) from the peer.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "bus: peer replied: " + e.Msg }

// Code is the error's first word (ERR, NOAUTH, WRONGPASS, ...).
func (e *ReplyError) Code() string {
	code, _, _ := strings.Cut(e.Msg, " ")
	return code
}
