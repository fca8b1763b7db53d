package command

// Redis error replies, spelled as Redis spells them so clients that match
// on them keep working.
const (
	errWrongType   = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errNotInt      = "ERR value is not an integer or out of range"
	errNotFloat    = "ERR value is not a valid float"
	errOverflow    = "ERR increment or decrement would overflow"
	errNaN         = "ERR increment would produce NaN or Infinity"
	errSyntax      = "ERR syntax error"
	errNoSuchKey   = "ERR no such key"
	errNoAuth      = "NOAUTH Authentication required."
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errOOM         = "OOM command not allowed when used memory > 'maxmemory'."
	errDBIndex     = "ERR DB index is out of range"
	errInvalidCur  = "ERR invalid cursor"
	errPositive    = "ERR value is out of range, must be positive"
	errHashNotInt  = "ERR hash value is not an integer"
	errNoPassword  = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	errNoProto     = "NOPROTO unsupported protocol version"
	errClientName  = "ERR Client names cannot contain spaces, newlines or special characters."
	errStringLimit = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
)
