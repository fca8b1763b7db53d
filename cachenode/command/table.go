package command

type flag uint16

const (
	flagWrite flag = 1 << iota
	flagReadonly
	flagDenyOOM
	flagFast
	flagNoAuth
	flagAdmin
	flagLoading
	flagStale
	flagBlocking
	flagMovableKeys
)

var flagNames = []struct {
	f    flag
	name string
}{{flagWrite, "write"}, {flagReadonly, "readonly"}, {flagDenyOOM, "denyoom"}, {flagAdmin, "admin"},
	{flagNoAuth, "no_auth"}, {flagLoading, "loading"}, {flagStale, "stale"}, {flagFast, "fast"},
	{flagBlocking, "blocking"}, {flagMovableKeys, "movablekeys"}}

// Spec describes one command: what COMMAND INFO/DOCS report and how Exec
// finds its keys (First/Last/Step as in Redis: Last < 0 counts from the
// end; First 0 = no keys).
type Spec struct {
	Name              string
	Arity             int
	flags             flag
	First, Last, Step int
	Group, Since      string
	Summary           string
	// KeyFlags are the key-spec flags (RW/RO/OW/RM plus ACCESS, UPDATE,
	// INSERT, DELETE).
	KeyFlags []string
	fn       func(*Ctx)
	// getKeys, when set, finds the keys instead of First/Last/Step, for
	// commands whose keys move with their arguments (LMPOP's numkeys, SORT's
	// STORE), as Redis's getkeys_proc. It returns no keys for arguments the
	// handler will refuse, so a bad numkeys is an error, not a CROSSSLOT.
	getKeys func(args [][]byte, buf [][]byte) [][]byte
	// limited: the command touches data, so namespace rate limits apply
	// (connection setup and introspection are not charged).
	limited bool
}

func (s *Spec) has(f flag) bool { return s.flags&f != 0 }

// keys appends args' keys to buf.
func (s *Spec) keys(args [][]byte, buf [][]byte) [][]byte {
	if s.getKeys != nil {
		return s.getKeys(args, buf)
	}
	if s.First == 0 || s.First >= len(args) {
		return buf
	}
	last := s.Last
	if last < 0 {
		last = len(args) + last
	}
	if last >= len(args) {
		last = len(args) - 1
	}
	for i := s.First; i <= last; i += s.Step {
		buf = append(buf, args[i])
	}
	return buf
}

var table = map[string]*Spec{}

func lookup(name []byte) *Spec {
	if len(name) > 32 {
		return nil
	}
	var b [32]byte
	for i, c := range name {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return table[string(b[:len(name)])]
}

// Key-spec flag sets, as Redis documents them per command.
var (
	ksRO       = []string{"RO", "ACCESS"}
	ksRW       = []string{"RW", "ACCESS", "UPDATE"}
	ksRWUpdate = []string{"RW", "UPDATE"}
	ksRWInsert = []string{"RW", "INSERT"}
	ksOW       = []string{"OW", "UPDATE"}
	ksRMDelete = []string{"RM", "DELETE"}
	ksRWDelete = []string{"RW", "ACCESS", "DELETE"}
)

func reg(name string, arity int, flags flag, first, last, step int, group, since string, ks []string, summary string, fn func(*Ctx)) {
	limited := group != "connection" && group != "server" && group != "cluster" || name == "dbsize" || name == "flushdb" || name == "flushall"
	table[name] = &Spec{Name: name, Arity: arity, flags: flags, First: first, Last: last, Step: step,
		Group: group, Since: since, KeyFlags: ks, Summary: summary, fn: fn, limited: limited}
}

const (
	rf  = flagReadonly | flagFast
	wf  = flagWrite | flagFast
	wdf = flagWrite | flagDenyOOM | flagFast
	wd  = flagWrite | flagDenyOOM
)

func init() {
	// connection
	reg("ping", -1, flagFast|flagStale, 0, 0, 0, "connection", "1.0.0", nil, "Returns the server's liveliness response.", cmdPing)
	reg("echo", 2, flagFast|flagStale, 0, 0, 0, "connection", "1.0.0", nil, "Returns the given string.", cmdEcho)
	reg("hello", -1, flagNoAuth|flagFast|flagStale|flagLoading, 0, 0, 0, "connection", "6.0.0", nil, "Handshakes with the server.", cmdHello)
	reg("auth", -2, flagNoAuth|flagFast|flagStale|flagLoading, 0, 0, 0, "connection", "1.0.0", nil, "Binds the connection to a namespace.", cmdAuth)
	reg("select", 2, flagFast|flagStale|flagLoading, 0, 0, 0, "connection", "1.0.0", nil, "Changes the selected database (only 0 exists).", cmdSelect)
	reg("quit", -1, flagNoAuth|flagFast|flagStale|flagLoading, 0, 0, 0, "connection", "1.0.0", nil, "Closes the connection.", cmdQuit)
	reg("client", -2, flagStale|flagLoading, 0, 0, 0, "connection", "2.4.0", nil, "A container for client connection commands.", cmdClient)
	// server
	reg("command", -1, flagStale|flagLoading, 0, 0, 0, "server", "2.8.13", nil, "Returns detailed information about all commands.", cmdCommand)
	reg("info", -1, flagStale|flagLoading, 0, 0, 0, "server", "1.0.0", nil, "Returns information and statistics about the server.", cmdInfo)
	reg("dbsize", 1, rf, 0, 0, 0, "server", "1.0.0", nil, "Returns the number of keys in the namespace.", cmdDBSize)
	reg("flushdb", -1, flagWrite, 0, 0, 0, "server", "1.0.0", nil, "Removes all keys from the namespace.", cmdFlushDB)
	reg("flushall", -1, flagWrite, 0, 0, 0, "server", "1.0.0", nil, "Removes all keys from the namespace.", cmdFlushDB)
	reg("config", -2, flagStale|flagLoading, 0, 0, 0, "server", "2.0.0", nil, "A container for server configuration commands.", cmdConfig)
	reg("time", 1, flagFast|flagStale|flagLoading, 0, 0, 0, "server", "2.6.0", nil, "Returns the server time.", cmdTime)
	reg("cache", -2, flagStale, 0, 0, 0, "server", "1.0.0", nil, "Portico cache introspection (HOTKEYS).", cmdCache)
	// strings
	reg("get", 2, rf, 1, 1, 1, "string", "1.0.0", ksRO, "Returns the string value of a key.", cmdGet)
	reg("set", -3, wd, 1, 1, 1, "string", "1.0.0", ksRW, "Sets the string value of a key, ignoring its type.", cmdSet)
	reg("setnx", 3, wdf, 1, 1, 1, "string", "1.0.0", ksOW, "Set the string value of a key only when the key doesn't exist.", cmdSetNX)
	reg("setex", 4, wd, 1, 1, 1, "string", "2.0.0", ksOW, "Sets the string value and expiration time of a key.", cmdSetEX)
	reg("psetex", 4, wd, 1, 1, 1, "string", "2.6.0", ksOW, "Sets the string value and expiration time in milliseconds of a key.", cmdPSetEX)
	reg("getdel", 2, wf, 1, 1, 1, "string", "6.2.0", ksRWDelete, "Returns the string value of a key after deleting the key.", cmdGetDel)
	reg("getex", -2, wf, 1, 1, 1, "string", "6.2.0", ksRWUpdate, "Returns the string value of a key after setting its expiration time.", cmdGetEx)
	reg("mget", -2, rf, 1, -1, 1, "string", "1.0.0", ksRO, "Atomically returns the string values of one or more keys.", cmdMGet)
	reg("mset", -3, wd, 1, -1, 2, "string", "1.0.1", ksOW, "Atomically creates or modifies the string values of one or more keys.", cmdMSet)
	reg("msetnx", -3, wd, 1, -1, 2, "string", "1.0.1", ksOW, "Atomically sets keys only when none of them exist.", cmdMSetNX)
	reg("append", 3, wdf, 1, 1, 1, "string", "2.0.0", ksRWInsert, "Appends a string to the value of a key.", cmdAppend)
	reg("strlen", 2, rf, 1, 1, 1, "string", "2.2.0", ksRO, "Returns the length of a string value.", cmdStrlen)
	reg("incr", 2, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Increments the integer value of a key by one.", cmdIncr)
	reg("decr", 2, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Decrements the integer value of a key by one.", cmdDecr)
	reg("incrby", 3, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Increments the integer value of a key by a number.", cmdIncrBy)
	reg("decrby", 3, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Decrements a number from the integer value of a key.", cmdDecrBy)
	reg("incrbyfloat", 3, wdf, 1, 1, 1, "string", "2.6.0", ksRW, "Increment the floating point value of a key by a number.", cmdIncrByFloat)
	reg("cas", -4, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Sets key to new if its value equals expected; replies 1 or 0.", cmdCAS)
	// keys
	reg("del", -2, flagWrite, 1, -1, 1, "generic", "1.0.0", ksRMDelete, "Deletes one or more keys.", cmdDel)
	reg("unlink", -2, wf, 1, -1, 1, "generic", "4.0.0", ksRMDelete, "Deletes one or more keys.", cmdDel)
	reg("exists", -2, rf, 1, -1, 1, "generic", "1.0.0", []string{"RO"}, "Determines whether one or more keys exist.", cmdExists)
	reg("expire", -3, wf, 1, 1, 1, "generic", "1.0.0", ksRWUpdate, "Sets the expiration time of a key in seconds.", cmdExpire)
	reg("pexpire", -3, wf, 1, 1, 1, "generic", "2.6.0", ksRWUpdate, "Sets the expiration time of a key in milliseconds.", cmdPExpire)
	reg("expireat", -3, wf, 1, 1, 1, "generic", "1.2.0", ksRWUpdate, "Sets the expiration time of a key to a Unix timestamp.", cmdExpireAt)
	reg("pexpireat", -3, wf, 1, 1, 1, "generic", "2.6.0", ksRWUpdate, "Sets the expiration time of a key to a Unix milliseconds timestamp.", cmdPExpireAt)
	reg("persist", 2, wf, 1, 1, 1, "generic", "2.2.0", ksRWUpdate, "Removes the expiration time of a key.", cmdPersist)
	reg("ttl", 2, rf, 1, 1, 1, "generic", "1.0.0", []string{"RO", "ACCESS"}, "Returns the expiration time in seconds of a key.", cmdTTL)
	reg("pttl", 2, rf, 1, 1, 1, "generic", "2.6.0", []string{"RO", "ACCESS"}, "Returns the expiration time in milliseconds of a key.", cmdPTTL)
	reg("type", 2, rf, 1, 1, 1, "generic", "1.0.0", []string{"RO"}, "Determines the type of value stored at a key.", cmdType)
	reg("rename", 3, flagWrite, 1, 2, 1, "generic", "1.0.0", ksRWDelete, "Renames a key and overwrites the destination.", cmdRename)
	reg("scan", -2, flagReadonly, 0, 0, 0, "generic", "2.8.0", nil, "Iterates over the key names in the namespace.", cmdScan)
	reg("keys", 2, flagReadonly, 0, 0, 0, "generic", "1.0.0", nil, "Returns all key names that match a pattern.", cmdKeys)
	// lists
	reg("lpush", -3, wdf, 1, 1, 1, "list", "1.0.0", ksRWInsert, "Prepends one or more elements to a list.", cmdLPush)
	reg("rpush", -3, wdf, 1, 1, 1, "list", "1.0.0", ksRWInsert, "Appends one or more elements to a list.", cmdRPush)
	reg("lpop", -2, wf, 1, 1, 1, "list", "1.0.0", ksRWDelete, "Returns the first elements in a list after removing it.", cmdLPop)
	reg("rpop", -2, wf, 1, 1, 1, "list", "1.0.0", ksRWDelete, "Returns and removes the last elements of a list.", cmdRPop)
	reg("llen", 2, rf, 1, 1, 1, "list", "1.0.0", []string{"RO"}, "Returns the length of a list.", cmdLLen)
	reg("lrange", 4, flagReadonly, 1, 1, 1, "list", "1.0.0", ksRO, "Returns a range of elements from a list.", cmdLRange)
	reg("lindex", 3, flagReadonly, 1, 1, 1, "list", "1.0.0", ksRO, "Returns an element from a list by its index.", cmdLIndex)
	reg("lrem", 4, flagWrite, 1, 1, 1, "list", "1.0.0", ksRWDelete, "Removes elements from a list.", cmdLRem)
	reg("ltrim", 4, flagWrite, 1, 1, 1, "list", "1.0.0", ksRWDelete, "Removes elements from both ends a list.", cmdLTrim)
	// sets
	reg("sadd", -3, wdf, 1, 1, 1, "set", "1.0.0", ksRWInsert, "Adds one or more members to a set.", cmdSAdd)
	reg("srem", -3, wf, 1, 1, 1, "set", "1.0.0", ksRWDelete, "Removes one or more members from a set.", cmdSRem)
	reg("smembers", 2, flagReadonly, 1, 1, 1, "set", "1.0.0", ksRO, "Returns all members of a set.", cmdSMembers)
	reg("sismember", 3, rf, 1, 1, 1, "set", "1.0.0", ksRO, "Determines whether a member belongs to a set.", cmdSIsMember)
	reg("smismember", -3, rf, 1, 1, 1, "set", "6.2.0", ksRO, "Determines whether multiple members belong to a set.", cmdSMIsMember)
	reg("scard", 2, rf, 1, 1, 1, "set", "1.0.0", []string{"RO"}, "Returns the number of members in a set.", cmdSCard)
	reg("spop", -2, wf, 1, 1, 1, "set", "1.0.0", ksRWDelete, "Returns one or more random members from a set after removing them.", cmdSPop)
	reg("srandmember", -2, flagReadonly, 1, 1, 1, "set", "1.0.0", ksRO, "Get one or multiple random members from a set.", cmdSRandMember)
	reg("sinter", -2, flagReadonly, 1, -1, 1, "set", "1.0.0", ksRO, "Returns the intersect of multiple sets.", cmdSInter)
	reg("sunion", -2, flagReadonly, 1, -1, 1, "set", "1.0.0", ksRO, "Returns the union of multiple sets.", cmdSUnion)
	reg("sdiff", -2, flagReadonly, 1, -1, 1, "set", "1.0.0", ksRO, "Returns the difference of multiple sets.", cmdSDiff)
	// hashes
	reg("hset", -4, wdf, 1, 1, 1, "hash", "2.0.0", ksRWUpdate, "Creates or modifies the value of a field in a hash.", cmdHSet)
	reg("hmset", -4, wdf, 1, 1, 1, "hash", "2.0.0", ksRWUpdate, "Sets the values of multiple fields.", cmdHMSet)
	reg("hget", 3, rf, 1, 1, 1, "hash", "2.0.0", ksRO, "Returns the value of a field in a hash.", cmdHGet)
	reg("hmget", -3, rf, 1, 1, 1, "hash", "2.0.0", ksRO, "Returns the values of all fields in a hash.", cmdHMGet)
	reg("hdel", -3, wf, 1, 1, 1, "hash", "2.0.0", ksRMDelete, "Deletes one or more fields and their values from a hash.", cmdHDel)
	reg("hgetall", 2, flagReadonly, 1, 1, 1, "hash", "2.0.0", ksRO, "Returns all fields and values in a hash.", cmdHGetAll)
	reg("hlen", 2, rf, 1, 1, 1, "hash", "2.0.0", []string{"RO"}, "Returns the number of fields in a hash.", cmdHLen)
	reg("hexists", 3, rf, 1, 1, 1, "hash", "2.0.0", []string{"RO"}, "Determines whether a field exists in a hash.", cmdHExists)
	reg("hincrby", 4, wdf, 1, 1, 1, "hash", "2.0.0", ksRW, "Increments the integer value of a field in a hash by a number.", cmdHIncrBy)
	reg("hkeys", 2, flagReadonly, 1, 1, 1, "hash", "2.0.0", []string{"RO"}, "Returns all fields in a hash.", cmdHKeys)
	reg("hvals", 2, flagReadonly, 1, 1, 1, "hash", "2.0.0", ksRO, "Returns all values in a hash.", cmdHVals)
}
