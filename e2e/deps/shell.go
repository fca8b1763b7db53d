package deps

import (
	"fmt"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// shellUses returns what a shell script runs: commands by name or absolute
// path, go tool and go install targets, and protoc include directories.
// Builtins, the script's own functions, relative paths (the repository's own
// programs) and words the script computes at run time are not uses. A
// command probed with `command -v` is not a use either: what follows it is.
// line0 is added to every line number (for scripts cut out of a file).
func shellUses(src, file string, line0 int) ([]Use, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), file)
	if err != nil {
		return nil, fmt.Errorf("deps: %s: %w", file, err)
	}
	funcs := map[string]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok {
			funcs[fd.Name.Value] = true
		}
		return true
	})
	var uses []Use
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok {
			return true
		}
		name, rest := command(call.Args)
		where := fmt.Sprintf("%s:%d", file, int(call.Pos().Line())+line0)
		switch {
		case name == "" || funcs[name] || interp.IsBuiltin(name) || strings.Contains(name, makePlaceholder):
		case strings.Contains(name, "/"):
			if strings.HasPrefix(name, "/") {
				uses = append(uses, Use{Kind: UseCmd, Name: name, Where: where})
			}
		default:
			uses = append(uses, Use{Kind: UseCmd, Name: name, Where: where})
			uses = append(uses, argUses(name, rest, where)...)
		}
		return true
	})
	return uses, nil
}

// command returns the program a simple command runs and its arguments,
// looking through wrappers (exec, env, timeout, runuser … --). It returns ""
// when that program is computed at run time or only probed (command -v).
func command(args []*syntax.Word) (string, []*syntax.Word) {
	for len(args) > 0 {
		w, ok := lit(args[0])
		if !ok {
			return "", nil
		}
		args = args[1:]
		switch w {
		case "exec", "nohup", "nice":
			args = skipFlags(args)
		case "command":
			if v, _ := first(args); v == "-v" || v == "-V" {
				return "", nil
			}
			args = skipFlags(args)
		case "env":
			for v, ok := first(args); ok && (strings.HasPrefix(v, "-") || strings.Contains(v, "=")); v, ok = first(args) {
				args = args[1:]
			}
		case "timeout": // options (some with values), then the duration
			for v, ok := first(args); ok && (v == "" || v[0] < '0' || v[0] > '9'); v, ok = first(args) {
				args = args[1:]
			}
			if len(args) > 0 {
				args = args[1:]
			}
		case "runuser", "sudo", "xargs":
			i := 0
			for ; i < len(args); i++ {
				if v, _ := lit(args[i]); v == "--" {
					break
				}
			}
			if i == len(args) {
				return "", nil // options with values we do not model
			}
			args = args[i+1:]
		default:
			return w, args
		}
	}
	return "", nil
}

func first(args []*syntax.Word) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	return lit(args[0])
}

func skipFlags(args []*syntax.Word) []*syntax.Word {
	for v, ok := first(args); ok && strings.HasPrefix(v, "-"); v, ok = first(args) {
		args = args[1:]
	}
	return args
}

// lit returns a word's value when it is literal, quoted or not.
func lit(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// argUses returns what a command's arguments ask of the machine: the tool
// of `go tool`, the pinned targets of `go install`/`go run`, protoc's
// include directories.
func argUses(name string, args []*syntax.Word, where string) []Use {
	var vals []string
	for _, a := range args {
		v, _ := lit(a) // "" for a computed argument
		vals = append(vals, v)
	}
	var uses []Use
	switch name {
	case "go":
		if len(vals) == 0 {
			return nil
		}
		switch vals[0] {
		case "tool":
			for _, v := range vals[1:] {
				if v != "" && !strings.HasPrefix(v, "-") {
					uses = append(uses, Use{Kind: UseGoTool, Name: v, Where: where})
					break
				}
			}
		case "install", "run":
			for _, v := range vals[1:] {
				if strings.Contains(v, "@") && !strings.HasPrefix(v, "-") {
					uses = append(uses, Use{Kind: UseGoInstall, Name: v, Where: where})
				}
			}
		}
	case "protoc":
		for i, v := range vals {
			var dir string
			switch {
			case (v == "-I" || v == "--proto_path") && i+1 < len(vals):
				dir = vals[i+1]
			case strings.HasPrefix(v, "--proto_path="):
				dir = strings.TrimPrefix(v, "--proto_path=")
			case strings.HasPrefix(v, "-I") && len(v) > 2:
				dir = v[2:]
			}
			if dir != "" {
				uses = append(uses, Use{Kind: UseInclude, Name: dir, Where: where})
			}
		}
	}
	return uses
}

// makePlaceholder stands for what make computes (automatic variables,
// functions, variables the Makefile does not set).
const makePlaceholder = "__make__"

var makeAssign = regexp.MustCompile(`^(?:export\s+|override\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(:=|::=|\?=|\+=|=)\s*(.*)$`)

// makefileUses returns what the recipes of a Makefile run. Each recipe line
// is a shell script of its own, with the Makefile's variables expanded.
func makefileUses(src, file string) ([]Use, error) {
	vars := map[string]string{}
	type recipe struct {
		text string
		line int
	}
	var recipes []recipe
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		text := lines[i]
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			text += "\n" + lines[i]
		}
		if strings.HasPrefix(text, "\t") {
			recipes = append(recipes, recipe{strings.TrimLeft(strings.TrimPrefix(text, "\t"), "@-+"), start})
			continue
		}
		if m := makeAssign.FindStringSubmatch(text); m != nil {
			val := strings.ReplaceAll(m[3], "\\\n", " ")
			switch m[2] {
			case "+=":
				vars[m[1]] = strings.TrimSpace(vars[m[1]] + " " + val)
			case "?=":
				if _, ok := vars[m[1]]; !ok {
					vars[m[1]] = val
				}
			default:
				vars[m[1]] = val
			}
		}
	}
	var uses []Use
	for _, r := range recipes {
		u, err := shellUses(expandMake(r.text, vars, 0), file, r.line)
		if err != nil {
			return nil, err
		}
		uses = append(uses, u...)
	}
	return uses, nil
}

// expandMake expands $(VAR) and ${VAR} from vars and turns $$ into $.
// Anything else make would compute becomes makePlaceholder.
func expandMake(s string, vars map[string]string, depth int) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch c := s[i+1]; c {
		case '$':
			b.WriteByte('$')
			i++
		case '(', '{':
			closer := byte(')')
			if c == '{' {
				closer = '}'
			}
			j, nest := i+2, 0
			for ; j < len(s); j++ {
				if s[j] == c {
					nest++
				} else if s[j] == closer {
					if nest == 0 {
						break
					}
					nest--
				}
			}
			if v, ok := vars[s[i+2:min(j, len(s))]]; ok && depth < 10 {
				b.WriteString(expandMake(v, vars, depth+1))
			} else {
				b.WriteString(makePlaceholder)
			}
			i = j
		default:
			b.WriteString(makePlaceholder)
			i++
		}
	}
	return b.String()
}

var fence = regexp.MustCompile("^\\s*```(sh|bash|shell)\\s*$")

// markdownUses returns what the sh, bash and shell code blocks of a
// Markdown file run: a README's examples must work as written.
func markdownUses(src, file string) ([]Use, error) {
	var uses []Use
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if !fence.MatchString(lines[i]) {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
		}
		u, err := shellUses(strings.Join(lines[start:i], "\n"), file, start)
		if err != nil {
			return nil, err
		}
		uses = append(uses, u...)
	}
	return uses, nil
}
