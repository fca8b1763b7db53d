package command

import "sort"

func sortedSpecs(names [][]byte) []*Spec {
	var out []*Spec
	if len(names) == 0 {
		for _, s := range table {
			out = append(out, s)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
	for _, n := range names {
		out = append(out, lookup(n)) // nil for unknown names: a null entry
	}
	return out
}

// cmdCommand serves COMMAND, COMMAND COUNT|LIST|INFO|DOCS|GETKEYS.
func cmdCommand(c *Ctx) {
	if len(c.Args) == 1 {
		writeInfos(c, sortedSpecs(nil))
		return
	}
	switch lower(c.Args[1]) {
	case "count":
		c.W.Int(int64(len(table)))
	case "list":
		specs := sortedSpecs(nil)
		c.W.Array(len(specs))
		for _, s := range specs {
			c.W.BulkString(s.Name)
		}
	case "info":
		writeInfos(c, sortedSpecs(c.Args[2:]))
	case "docs":
		specs := sortedSpecs(c.Args[2:])
		n := 0
		for _, s := range specs {
			if s != nil {
				n++
			}
		}
		c.W.Map(n)
		for _, s := range specs {
			if s == nil {
				continue
			}
			c.W.BulkString(s.Name)
			c.W.Map(4)
			c.W.BulkString("summary")
			c.W.BulkString(s.Summary)
			c.W.BulkString("since")
			c.W.BulkString(s.Since)
			c.W.BulkString("group")
			c.W.BulkString(s.Group)
			c.W.BulkString("arguments")
			c.W.Array(0)
		}
	case "getkeys":
		if len(c.Args) < 4 {
			c.W.Error("ERR wrong number of arguments for 'command|getkeys' command")
			return
		}
		s := lookup(c.Args[2])
		if s == nil {
			c.W.Error("ERR Invalid command specified")
			return
		}
		args := c.Args[2:]
		if (s.Arity > 0 && len(args) != s.Arity) || (s.Arity < 0 && len(args) < -s.Arity) {
			c.W.Error("ERR Invalid number of arguments specified for command")
			return
		}
		keys := s.keys(args, nil)
		if len(keys) == 0 {
			c.W.Error("ERR The command has no key arguments")
			return
		}
		c.W.Array(len(keys))
		for _, k := range keys {
			c.W.Bulk(k)
		}
	default:
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 64) + "'. Try COMMAND HELP.")
	}
}

func writeInfos(c *Ctx, specs []*Spec) {
	c.W.Array(len(specs))
	for _, s := range specs {
		if s == nil {
			c.W.NullArray()
			continue
		}
		writeInfo(c, s)
	}
}

// writeInfo writes the 10-element reply of Redis 7 COMMAND INFO.
func writeInfo(c *Ctx, s *Spec) {
	w := c.W
	w.Array(10)
	w.BulkString(s.Name)
	w.Int(int64(s.Arity))
	var flags []string
	for _, f := range flagNames {
		if s.has(f.f) {
			flags = append(flags, f.name)
		}
	}
	w.Set(len(flags))
	for _, f := range flags {
		w.Simple(f)
	}
	w.Int(int64(s.First))
	w.Int(int64(s.Last))
	w.Int(int64(s.Step))
	cats := []string{"@" + s.Group}
	switch {
	case s.has(flagWrite):
		cats = append(cats, "@write")
	case s.has(flagReadonly):
		cats = append(cats, "@read")
	default:
		cats = append(cats, "@connection")
	}
	if s.has(flagFast) {
		cats = append(cats, "@fast")
	} else {
		cats = append(cats, "@slow")
	}
	w.Set(len(cats))
	for _, cat := range cats {
		w.Simple(cat)
	}
	w.Set(0) // tips
	if s.First == 0 {
		w.Array(0)
	} else {
		w.Array(1)
		w.Map(3)
		w.BulkString("flags")
		w.Set(len(s.KeyFlags))
		for _, f := range s.KeyFlags {
			w.Simple(f)
		}
		w.BulkString("begin_search")
		w.Map(2)
		w.BulkString("type")
		w.BulkString("index")
		w.BulkString("spec")
		w.Map(1)
		w.BulkString("index")
		w.Int(int64(s.First))
		w.BulkString("find_keys")
		w.Map(2)
		w.BulkString("type")
		w.BulkString("range")
		w.BulkString("spec")
		w.Map(3)
		last := int64(s.Last)
		if last > 0 {
			last -= int64(s.First)
		}
		w.BulkString("lastkey")
		w.Int(last)
		w.BulkString("keystep")
		w.Int(int64(s.Step))
		w.BulkString("limit")
		w.Int(0)
	}
	w.Array(0) // subcommands
}
