package doccheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goFile is a file name as doc comments mention them: name.go, not part of a path.
var goFile = regexp.MustCompile(`(^|[^/\w.-])([\w-]+\.go)\b`)

// TestEveryPackageMapsItsFiles: every package under pkg/, internal/ and cmd/ has a doc.go
// whose package comment names each of its (non-test) files, and names no file it does not
// have. A file added or removed without its line in the map fails here.
func TestEveryPackageMapsItsFiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, top := range []string{"pkg", "internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
			files := sources(t, path)
			if len(files) == 0 {
				return nil
			}
			dirs++
			rel, _ := filepath.Rel(root, path)
			checkMap(t, rel, path, files)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if dirs < 20 {
		t.Fatalf("only %d packages found under %s: the walk is wrong", dirs, root)
	}
}

// sources lists the non-test Go files of dir.
func sources(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out = append(out, n)
		}
	}
	return out
}

func checkMap(t *testing.T, rel, dir string, files []string) {
	t.Helper()
	if !slices.Contains(files, "doc.go") {
		t.Errorf("%s: no doc.go saying what the package owns", rel)
		return
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Errorf("%s/doc.go: %v", rel, err)
		return
	}
	if f.Doc == nil {
		t.Errorf("%s/doc.go: no package comment", rel)
		return
	}
	text := f.Doc.Text()
	named := map[string]bool{}
	for _, m := range goFile.FindAllStringSubmatch(text, -1) {
		named[m[2]] = true
	}
	for _, file := range files {
		if file != "doc.go" && !named[file] {
			t.Errorf("%s/doc.go: does not say what %s holds", rel, file)
		}
	}
	all, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for file := range named {
		if !slices.Contains(all, filepath.Join(dir, file)) {
			t.Errorf("%s/doc.go: names %s, which the package does not have", rel, file)
		}
	}
}
