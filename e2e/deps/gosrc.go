package deps

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// goUses returns the programs the Go files of one package directory run
// through os/exec with a constant name: exec.Command("redis-cli", …),
// exec.LookPath("envoy"), a range over a literal list of names passed to
// them, and calls with a constant to a function of the package that passes
// its parameter on to them (needTool(t, "redis-benchmark")).
func goUses(fset *token.FileSet, files map[string]*ast.File, rel func(string) string) []Use {
	type wrapper struct{ param int }
	wrappers := map[string]wrapper{}
	var uses []Use
	add := func(name string, pos token.Pos) {
		if name == "" || (strings.Contains(name, "/") && !strings.HasPrefix(name, "/")) {
			return // a repository path or a computed name
		}
		p := fset.Position(pos)
		uses = append(uses, Use{Kind: UseCmd, Name: name, Where: fmt.Sprintf("%s:%d", rel(p.Filename), p.Line)})
	}
	for _, f := range files {
		execName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"os/exec"` {
				execName = "exec"
				if imp.Name != nil {
					execName = imp.Name.Name
				}
			}
		}
		if execName == "" {
			continue
		}
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != execName {
				return true
			}
			idx := map[string]int{"Command": 0, "LookPath": 0, "CommandContext": 1}
			i, ok := idx[sel.Sel.Name]
			if !ok || i >= len(call.Args) {
				return true
			}
			switch arg := call.Args[i].(type) {
			case *ast.BasicLit:
				add(stringLit(arg), arg.Pos())
			case *ast.Ident:
				if fn, param := enclosingParam(stack, arg.Name); fn != "" {
					wrappers[fn] = wrapper{param}
				}
				for _, name := range rangedOver(stack, arg.Name) {
					add(name, arg.Pos())
				}
			}
			return true
		})
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := call.Fun.(*ast.Ident)
			if !ok {
				return true
			}
			if w, ok := wrappers[id.Name]; ok && w.param < len(call.Args) {
				if l, ok := call.Args[w.param].(*ast.BasicLit); ok {
					add(stringLit(l), l.Pos())
				}
			}
			return true
		})
	}
	return uses
}

func stringLit(l *ast.BasicLit) string {
	if l.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(l.Value)
	if err != nil {
		return ""
	}
	return s
}

// enclosingParam returns the top-level function that name is a parameter of
// and its position among the parameters.
func enclosingParam(stack []ast.Node, name string) (string, int) {
	for i := len(stack) - 1; i >= 0; i-- {
		switch fn := stack[i].(type) {
		case *ast.FuncLit:
			return "", 0 // a closure's parameter is not a package function's
		case *ast.FuncDecl:
			if fn.Recv != nil {
				return "", 0
			}
			idx := 0
			for _, field := range fn.Type.Params.List {
				if len(field.Names) == 0 {
					idx++
				}
				for _, n := range field.Names {
					if n.Name == name {
						return fn.Name.Name, idx
					}
					idx++
				}
			}
			return "", 0
		}
	}
	return "", 0
}

// rangedOver returns the strings of a literal list that name ranges over:
// for _, name := range []string{"a", "b"}.
func rangedOver(stack []ast.Node, name string) []string {
	for i := len(stack) - 1; i >= 0; i-- {
		r, ok := stack[i].(*ast.RangeStmt)
		if !ok {
			continue
		}
		if v, ok := r.Value.(*ast.Ident); !ok || v.Name != name {
			continue
		}
		lit, ok := r.X.(*ast.CompositeLit)
		if !ok {
			return nil
		}
		var out []string
		for _, e := range lit.Elts {
			if l, ok := e.(*ast.BasicLit); ok {
				out = append(out, stringLit(l))
			}
		}
		return out
	}
	return nil
}

// parseGoDir parses the non-generated Go files of one directory.
func parseGoDir(fset *token.FileSet, dir string, names []string) (map[string]*ast.File, error) {
	files := map[string]*ast.File{}
	for _, n := range names {
		path := filepath.Join(dir, n)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("deps: %w", err)
		}
		files[path] = f
	}
	return files, nil
}
