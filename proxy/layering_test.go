package proxy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The package's files in three groups, each using only its own and those
// below it (assemble.go says why): a file is in exactly one.
const (
	groupEdge = iota
	groupHandlers
	groupAssembly
)

var fileGroups = map[string]int{
	"admin.go": groupEdge, "audit.go": groupEdge, "canonical.go": groupEdge, "defaults.go": groupEdge,
	"doc.go": groupEdge, "errors.go": groupEdge, "lifecycle.go": groupEdge, "limits.go": groupEdge,
	"metrics.go": groupEdge, "middleware.go": groupEdge, "parts.go": groupEdge, "passthrough.go": groupEdge,
	"reload.go": groupEdge, "routes.go": groupEdge, "server.go": groupEdge, "shares.go": groupEdge,
	"status.go": groupEdge, "tracing.go": groupEdge,

	"features.go": groupHandlers, "mcp.go": groupHandlers, "mcpnative.go": groupHandlers,
	"oauth.go": groupHandlers, "turns.go": groupHandlers, "upgrade.go": groupHandlers,

	"assemble.go": groupAssembly,
}

var groupNames = []string{"edge", "handlers", "assembly"}

// TestFileLayering: no file uses a name (a function, method, type, field,
// variable or constant) declared in a file of a group above its own — the
// edge calls no handler, the handlers do not reach the assembly — and
// every file of the package is in a group. Names are resolved by
// type-checking the package's own files (imports stand empty: only this
// package's names matter).
func TestFileLayering(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		if _, ok := fileGroups[p]; !ok {
			t.Errorf("%s is in no group: add it to fileGroups", p)
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer: emptyImporter{},
		Error:    func(error) {}, // names of imported packages stay unresolved
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, _ := conf.Check("github.com/bailinghub/knowledge-sidecar/proxy", fset, files, info)
	seen := map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if fileGroups[from] < fileGroups[to] {
			seen[from+" ("+groupNames[fileGroups[from]]+") uses "+obj.Name()+" of "+to+" ("+groupNames[fileGroups[to]]+")"] = true
		}
	}
	var bad []string
	for s := range seen {
		bad = append(bad, s)
	}
	sort.Strings(bad)
	for _, s := range bad {
		t.Error(s)
	}
	if len(info.Uses) < 1000 {
		t.Fatalf("only %d names resolved: the check would see nothing", len(info.Uses))
	}
}

// emptyImporter stands every import in as an empty package.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}
