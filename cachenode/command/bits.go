package command

import (
	"math"
	"math/bits"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// String ranges and bitmaps: GETRANGE/SUBSTR, SETRANGE, GETBIT, SETBIT,
// BITCOUNT, BITPOS, BITOP, plus GETSET and LCS, with Redis 7.0's argument
// order and errors. A string never grows past Redis's proto-max-bulk-len
// (512 MB) nor past the namespace's value-size limit; growth is accounted
// as any write (Txn.Append/Update), and SETBIT/SETRANGE within the
// current length change the value in place.

// maxString is Redis's proto-max-bulk-len default: the largest string.
const maxString = 512 << 20

const (
	errBitOffset = "ERR bit offset is not an integer or out of range"
	errBitValue  = "ERR bit is not an integer or out of range"
	errOffset    = "ERR offset is out of range"
)

func init() {
	reg("getrange", 4, flagReadonly, 1, 1, 1, "string", "2.4.0", ksRO, "Returns a substring of the string stored at a key.", cmdGetRange)
	reg("substr", 4, flagReadonly, 1, 1, 1, "string", "1.0.0", ksRO, "Returns a substring from a string value.", cmdGetRange)
	reg("setrange", 4, wd, 1, 1, 1, "string", "2.2.0", ksRWUpdate, "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", cmdSetRange)
	reg("getbit", 3, rf, 1, 1, 1, "bitmap", "2.2.0", ksRO, "Returns a bit value by offset.", cmdGetBit)
	reg("setbit", 4, wd, 1, 1, 1, "bitmap", "2.2.0", ksRWUpdate, "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", cmdSetBit)
	reg("bitcount", -2, flagReadonly, 1, 1, 1, "bitmap", "2.6.0", ksRO, "Counts the number of set bits (population counting) in a string.", cmdBitCount)
	reg("bitpos", -3, flagReadonly, 1, 1, 1, "bitmap", "2.8.7", ksRO, "Finds the first set (1) or clear (0) bit in a string.", cmdBitPos)
	reg("bitop", -4, wd, 2, -1, 1, "bitmap", "2.6.0", ksOW, "Performs bitwise operations on multiple strings, and stores the result.", cmdBitOp)
	reg("getset", 3, wdf, 1, 1, 1, "string", "1.0.0", ksRW, "Returns the previous string value of a key after setting it to a new value.", cmdGetSet)
	reg("lcs", -3, flagReadonly, 1, 2, 1, "string", "7.0.0", ksRO, "Finds the longest common substring.", cmdLCS)
}

// clampRange converts Redis start/end (negative from the end) over n units
// into an inclusive range; ok=false when it is empty. It is GETRANGE's and
// BITCOUNT's conversion (BITPOS's lacks the first check, see bitRange).
func clampRange(start, end, n int64) (int64, int64, bool) {
	if start < 0 && end < 0 && start > end {
		return 0, 0, false
	}
	return bitRange(start, end, n)
}

func bitRange(start, end, n int64) (int64, int64, bool) {
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start, end = max(start, 0), max(end, 0)
	if end >= n {
		end = n - 1
	}
	if start > end || n == 0 {
		return 0, 0, false
	}
	return start, end, true
}

func cmdGetRange(c *Ctx) {
	start, ok1 := atoi(c.Args[2])
	end, ok2 := atoi(c.Args[3])
	if !ok1 || !ok2 {
		c.W.Error(errNotInt)
		return
	}
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.BulkString("")
		return
	}
	from, to, ok := clampRange(start, end, int64(len(e.Str)))
	if !ok {
		c.W.BulkString("")
		return
	}
	c.W.Bulk(e.Str[from : to+1])
}

// growString makes key's string at least n bytes (zero-filled), creating
// it when e is nil, after the size checks; it returns the entry now at key
// or nil after replying with an error.
func growString(c *Ctx, key []byte, e *keyspace.Entry, n int64) *keyspace.Entry {
	if e != nil && int64(len(e.Str)) >= n {
		return e
	}
	if !c.valueOK(int(n)) {
		return nil
	}
	if e == nil {
		return c.Tx.SetString(key, make([]byte, n), c.defaultExpire())
	}
	return c.Tx.Append(key, e, make([]byte, n-int64(len(e.Str))))
}

func cmdSetRange(c *Ctx) {
	key, val := c.Args[1], c.Args[3]
	off, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if off < 0 {
		c.W.Error(errOffset)
		return
	}
	e, ok := c.stringAt(key, false)
	if !ok {
		return
	}
	if len(val) == 0 {
		if e == nil {
			c.W.Int(0)
		} else {
			c.W.Int(int64(len(e.Str)))
		}
		return
	}
	if off+int64(len(val)) > maxString {
		c.W.Error(errStringLimit)
		return
	}
	if e = growString(c, key, e, off+int64(len(val))); e == nil {
		return
	}
	copy(e.Str[off:], val)
	c.Tx.Update(key, e)
	c.W.Int(int64(len(e.Str)))
}

// bitOffset parses a bit offset: a non-negative integer below 512 MB of
// bits (SETBIT/GETBIT refuse the rest as not an integer).
func bitOffset(c *Ctx, b []byte) (int64, bool) {
	n, ok := atoi(b)
	if !ok || n < 0 || n>>3 >= maxString {
		c.W.Error(errBitOffset)
		return 0, false
	}
	return n, true
}

func cmdGetBit(c *Ctx) {
	off, ok := bitOffset(c, c.Args[2])
	if !ok {
		return
	}
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil || off>>3 >= int64(len(e.Str)) {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(e.Str[off>>3]>>(7-off&7)) & 1)
}

func cmdSetBit(c *Ctx) {
	key := c.Args[1]
	off, ok := bitOffset(c, c.Args[2])
	if !ok {
		return
	}
	on, ok := atoi(c.Args[3])
	if !ok || on&^1 != 0 {
		c.W.Error(errBitValue)
		return
	}
	e, ok := c.stringAt(key, false)
	if !ok {
		return
	}
	if e = growString(c, key, e, off>>3+1); e == nil {
		return
	}
	mask := byte(1) << (7 - off&7)
	old := int64(0)
	if e.Str[off>>3]&mask != 0 {
		old = 1
	}
	if on == 1 {
		e.Str[off>>3] |= mask
	} else {
		e.Str[off>>3] &^= mask
	}
	c.Tx.Update(key, e)
	c.W.Int(old)
}

// bitUnit parses BITCOUNT/BITPOS's BYTE|BIT.
func bitUnit(c *Ctx, b []byte) (isBit, ok bool) {
	switch {
	case eqFold(b, "bit"):
		return true, true
	case eqFold(b, "byte"):
		return false, true
	}
	c.W.Error(errSyntax)
	return false, false
}

func popcount(b []byte) int64 {
	var n int
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return int64(n)
}

// cmdBitCount follows Redis 7.0: a missing key is 0 whatever the range
// arguments, the range is parsed after the type check.
func cmdBitCount(c *Ctx) {
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	p := e.Str
	switch len(c.Args) {
	case 2:
		c.W.Int(popcount(p))
		return
	case 4, 5:
	default:
		c.W.Error(errSyntax)
		return
	}
	start, ok1 := atoi(c.Args[2])
	if !ok1 {
		c.W.Error(errNotInt)
		return
	}
	end, ok2 := atoi(c.Args[3])
	if !ok2 {
		c.W.Error(errNotInt)
		return
	}
	isBit := false
	if len(c.Args) == 5 {
		if isBit, ok = bitUnit(c, c.Args[4]); !ok {
			return
		}
	}
	n := int64(len(p))
	if isBit {
		n <<= 3
	}
	from, to, ok := clampRange(start, end, n)
	if !ok {
		c.W.Int(0)
		return
	}
	if !isBit {
		c.W.Int(popcount(p[from : to+1]))
		return
	}
	count := popcount(p[from>>3 : to>>3+1])
	count -= int64(bits.OnesCount8(p[from>>3] & ^byte(0xff>>(from&7)))) // bits before from in its byte
	count -= int64(bits.OnesCount8(p[to>>3] & byte(0xff>>(to&7+1))))    // bits after to in its byte
	c.W.Int(count)
}

// cmdBitPos follows Redis 7.0's bitposCommand: the first bit set to bit in
// the range; a missing key is all zeros; for 0 with no end given the
// string counts as padded with zeros (the bit just after it), with an
// end given a range of ones answers -1.
func cmdBitPos(c *Ctx) {
	b, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if b != 0 && b != 1 {
		c.W.Error("ERR The bit argument must be 1 or 0.")
		return
	}
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(map[bool]int64{true: -1, false: 0}[b == 1])
		return
	}
	p := e.Str
	n := int64(len(p))
	isBit, endGiven := false, false
	var start, end int64
	switch len(c.Args) {
	case 3:
		start, end = 0, n-1
	case 4, 5, 6:
		if start, ok = atoi(c.Args[3]); !ok {
			c.W.Error(errNotInt)
			return
		}
		if len(c.Args) == 6 {
			if isBit, ok = bitUnit(c, c.Args[5]); !ok {
				return
			}
		}
		if len(c.Args) >= 5 {
			if end, ok = atoi(c.Args[4]); !ok {
				c.W.Error(errNotInt)
				return
			}
			endGiven = true
		} else if isBit {
			end = n<<3 + 7
		} else {
			end = n - 1
		}
	default:
		c.W.Error(errSyntax)
		return
	}
	units := n
	if isBit {
		units <<= 3
	}
	from, to, ok := bitRange(start, end, units)
	if !ok {
		c.W.Int(-1)
		return
	}
	if !isBit {
		from, to = from<<3, to<<3+7
	}
	if i := firstBit(p, from, to, b); i >= 0 {
		c.W.Int(i)
		return
	}
	if b == 1 || endGiven {
		c.W.Int(-1)
		return
	}
	c.W.Int((to>>3 + 1) << 3) // the first bit after the range's last byte: zero padding
}

// firstBit is the position of the first bit equal to b in p's bits
// [from, to], -1 when none; whole bytes that cannot hold it are skipped.
func firstBit(p []byte, from, to, b int64) int64 {
	bit := func(i int64) bool { return int64(p[i>>3]>>(7-i&7))&1 == b }
	i := from
	for ; i <= to && i&7 != 0; i++ {
		if bit(i) {
			return i
		}
	}
	skip := byte(0)
	if b == 0 {
		skip = 0xff
	}
	for i+7 <= to && p[i>>3] == skip {
		i += 8
	}
	for ; i <= to; i++ {
		if bit(i) {
			return i
		}
	}
	return -1
}

func cmdBitOp(c *Ctx) {
	op := lower(c.Args[1])
	switch op {
	case "and", "or", "xor", "not":
	default:
		c.W.Error(errSyntax)
		return
	}
	if op == "not" && len(c.Args) != 4 {
		c.W.Error("ERR BITOP NOT must be called with a single source key.")
		return
	}
	srcs := make([][]byte, 0, len(c.Args)-3)
	maxLen, minLen := 0, math.MaxInt
	for _, k := range c.Args[3:] {
		e, ok := c.stringAt(k, true)
		if !ok {
			return
		}
		var v []byte
		if e != nil {
			v = e.Str
		}
		srcs = append(srcs, v)
		maxLen, minLen = max(maxLen, len(v)), min(minLen, len(v))
	}
	dst := c.Args[2]
	if maxLen == 0 {
		c.Tx.Delete(dst)
		c.W.Int(0)
		return
	}
	res := make([]byte, maxLen)
	for i := range res {
		var acc byte
		for j, s := range srcs {
			var x byte
			if i < len(s) {
				x = s[i]
			}
			switch {
			case op == "not":
				acc = ^x
			case j == 0:
				acc = x
			case op == "and":
				acc &= x
			case op == "or":
				acc |= x
			default:
				acc ^= x
			}
		}
		res[i] = acc
	}
	c.Tx.SetString(dst, res, c.defaultExpire())
	c.W.Int(int64(maxLen))
}

func cmdGetSet(c *Ctx) {
	key, val := c.Args[1], c.Args[2]
	old, ok := c.stringAt(key, true)
	if !ok {
		return
	}
	if !c.valueOK(len(val)) {
		return
	}
	if old == nil {
		c.W.Null()
	} else {
		c.W.Bulk(old.Str) // before the overwrite reuses its buffer
	}
	c.Tx.SetStringOver(key, old, val, c.defaultExpire())
}

// maxLCSCells bounds LCS's table (4 bytes a cell, 128 MB): past it the
// command answers Redis's allocation failure rather than hold that much
// transient memory on a cache node (two 5 KB strings fit).
const maxLCSCells = 1 << 25

func cmdLCS(c *Ctx) {
	ea, eb := c.Tx.Get(c.Args[1]), c.Tx.Get(c.Args[2])
	if (ea != nil && ea.Kind() != keyspace.KindString) || (eb != nil && eb.Kind() != keyspace.KindString) {
		c.W.Error("ERR The specified keys must contain string values")
		return
	}
	var a, b []byte
	if ea != nil {
		a = ea.Str
	}
	if eb != nil {
		b = eb.Str
	}
	var getIdx, getLen, withLen bool
	minLen := int64(0)
	for j := 3; j < len(c.Args); j++ {
		switch {
		case eqFold(c.Args[j], "idx"):
			getIdx = true
		case eqFold(c.Args[j], "len"):
			getLen = true
		case eqFold(c.Args[j], "withmatchlen"):
			withLen = true
		case eqFold(c.Args[j], "minmatchlen") && j+1 < len(c.Args):
			n, ok := atoi(c.Args[j+1])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			minLen = max(n, 0)
			j++
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if getIdx && getLen {
		c.W.Error("ERR If you want both the length and indexes, please just use IDX.")
		return
	}
	if uint64(len(a)+1)*uint64(len(b)+1) > maxLCSCells {
		c.W.Error("ERR Insufficient memory, failed allocating transient memory for LCS")
		return
	}
	lcsReply(c, a, b, getIdx, getLen, withLen, minLen)
}

// lcsReply is Redis's lcsCommand: the dynamic-programming table, then a
// walk back from its end collecting the string and the matching ranges
// (last first).
func lcsReply(c *Ctx, a, b []byte, getIdx, getLen, withLen bool, minLen int64) {
	alen, blen := len(a), len(b)
	w := blen + 1
	tab := make([]uint32, (alen+1)*(blen+1))
	for i := 1; i <= alen; i++ {
		for j := 1; j <= blen; j++ {
			if a[i-1] == b[j-1] {
				tab[i*w+j] = tab[(i-1)*w+j-1] + 1
			} else {
				tab[i*w+j] = max(tab[(i-1)*w+j], tab[i*w+j-1])
			}
		}
	}
	total := tab[alen*w+blen]
	if getLen {
		c.W.Int(int64(total))
		return
	}
	result := make([]byte, total)
	type match struct{ a0, a1, b0, b1 int }
	var matches []match
	idx := int(total)
	i, j := alen, blen
	aStart, aEnd, bStart, bEnd := alen, 0, 0, 0 // aStart == alen: no range open
	for i > 0 && j > 0 {
		emit := false
		if a[i-1] == b[j-1] {
			result[idx-1] = a[i-1]
			if aStart == alen {
				aStart, aEnd, bStart, bEnd = i-1, i-1, j-1, j-1
			} else if aStart == i && bStart == j {
				aStart--
				bStart--
			} else {
				emit = true
			}
			if aStart == 0 || bStart == 0 {
				emit = true
			}
			idx--
			i--
			j--
		} else {
			if tab[(i-1)*w+j] > tab[i*w+j-1] {
				i--
			} else {
				j--
			}
			if aStart != alen {
				emit = true
			}
		}
		if emit {
			if minLen == 0 || int64(aEnd-aStart+1) >= minLen {
				matches = append(matches, match{aStart, aEnd, bStart, bEnd})
			}
			aStart = alen
		}
	}
	if !getIdx {
		c.W.Bulk(result)
		return
	}
	c.W.Map(2)
	c.W.BulkString("matches")
	c.W.Array(len(matches))
	for _, m := range matches {
		if withLen {
			c.W.Array(3)
		} else {
			c.W.Array(2)
		}
		c.W.Array(2)
		c.W.Int(int64(m.a0))
		c.W.Int(int64(m.a1))
		c.W.Array(2)
		c.W.Int(int64(m.b0))
		c.W.Int(int64(m.b1))
		if withLen {
			c.W.Int(int64(m.a1 - m.a0 + 1))
		}
	}
	c.W.BulkString("len")
	c.W.Int(int64(total))
}
