package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestFrontsDecodeAndAnswerErrorsAtOneSite: what the fronts' doc.go files say of them. Each
// package of the HTTP fronts writes its errors in one function, writeError, and nothing else
// uses the filters' writers of errors; each front decodes the Kubernetes API's options with the
// ParameterCodec kube-apiserver decodes with (filters.DecodeParameters) in one function. (The
// native API's own parameters, such as sortBy and by, are read where they are used.)
func TestFrontsDecodeAndAnswerErrorsAtOneSite(t *testing.T) {
	writers := map[string]bool{"WriteError": true, "WriteAPIError": true, "WriteStatus": true}
	for _, tc := range []struct {
		dir     string
		decoder string // the one function that decodes parameters; "" for none
	}{
		{"pkg/kubeapi", "decodeList"},
		{"pkg/kubeapi/discovery", ""},
		{"pkg/nativeapi", "selection"},
	} {
		dir := filepath.Join("../..", tc.dir)
		errorSites, decoders := 0, map[string]int{}
		for _, name := range sources(t, dir) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Every use of the filters' writers or decoder counts, called or passed as a
			// value, in a function or at package level (a func literal in a var), by the
			// name the file imports the package under.
			pkgName := ""
			for _, im := range f.Imports {
				if im.Path.Value == `"github.com/multicache/multicache/pkg/filters"` {
					pkgName = "filters"
					if im.Name != nil {
						pkgName = im.Name.Name
					}
				}
			}
			if pkgName == "" {
				continue
			}
			if pkgName == "." || pkgName == "_" {
				t.Errorf("%s/%s imports the filters as %q: the uses of its writers cannot be told", tc.dir, name, pkgName)
				continue
			}
			for _, d := range f.Decls {
				owner := "package level"
				if fn, ok := d.(*ast.FuncDecl); ok {
					owner = fn.Name.Name
				}
				ast.Inspect(d, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != pkgName {
						return true
					}
					switch {
					case writers[sel.Sel.Name]:
						errorSites++
						if owner != "writeError" {
							t.Errorf("%s: %s uses filters.%s: errors are written by writeError alone (%s)", tc.dir, owner, sel.Sel.Name, fset.Position(sel.Pos()))
						}
					case sel.Sel.Name == "DecodeParameters":
						decoders[owner]++
					}
					return true
				})
			}
		}
		if errorSites != 1 {
			t.Errorf("%s: %d uses of the filters' error writers, want 1 (in writeError)", tc.dir, errorSites)
		}
		for fn := range decoders {
			if fn != tc.decoder {
				t.Errorf("%s: %s decodes parameters; want %q alone to", tc.dir, fn, tc.decoder)
			}
		}
		if tc.decoder != "" && decoders[tc.decoder] == 0 {
			t.Errorf("%s: %s decodes no parameters: the walk is wrong", tc.dir, tc.decoder)
		}
	}
}
