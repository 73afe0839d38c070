// Where go doc finds each package's doc: go doc joins every comment that sits directly above a
// file's `package` line into the package doc, so a file header without a blank line below it
// would open (or join) the doc of its package.
//
// Invariant: in every package of the repository (each directory's files of one package name, test
// files and files of every build tag included), one file at most carries a package doc, and that
// doc opens "Package <name>" ("Command <name>" for a command).

package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOnePackageDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := map[string][]string{} // "dir (package name)" → its files that carry a package doc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil || f.Doc == nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.Dir(rel)
		key := dir + " (package " + f.Name.Name + ")"
		docs[key] = append(docs[key], filepath.Base(rel))
		opening := "Package " + f.Name.Name + " "
		if f.Name.Name == "main" {
			opening = "Command " + filepath.Base(dir) + " "
		}
		if !strings.HasPrefix(f.Doc.Text(), opening) {
			t.Errorf("%s: the comment above `package` does not open %q, so it is no package doc: put a blank line between it and `package`", rel, opening)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range slices.Sorted(maps.Keys(docs)) {
		if files := docs[key]; len(files) > 1 {
			t.Errorf("%s: %d files carry a package doc (%s); keep the one meant to, and put a blank line below the others' headers", key, len(files), strings.Join(files, ", "))
		}
	}
}
