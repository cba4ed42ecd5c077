package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestFrontsDecodeAndAnswerErrorsAtOneSite: what the fronts' doc.go files say of them. Each
// package of the HTTP fronts writes its errors in one function, writeError, and no other
// function calls the filters' writers of errors; each front decodes a request's parameters
// (filters.DecodeParameters, the ParameterCodec kube-apiserver decodes with) in one function.
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
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "filters" {
						return true
					}
					switch {
					case writers[sel.Sel.Name]:
						errorSites++
						if fn.Name.Name != "writeError" {
							t.Errorf("%s: %s calls filters.%s: errors are written by writeError alone (%s)", tc.dir, fn.Name.Name, sel.Sel.Name, fset.Position(call.Pos()))
						}
					case sel.Sel.Name == "DecodeParameters":
						decoders[fn.Name.Name]++
					}
					return true
				})
			}
		}
		if errorSites != 1 {
			t.Errorf("%s: %d calls of the filters' error writers, want 1 (in writeError)", tc.dir, errorSites)
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
