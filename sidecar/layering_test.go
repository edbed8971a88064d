package sidecar

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLayering keeps the import rules of docs/architecture.md true: data
// flows one way (edge → decisions → adapters), every layer speaks in
// corefacts, which does no I/O, and the two adapters of Core know nothing of
// each other; the shared Redis client is a leaf, and nothing the binary
// links comes from test/. Only non-test files count (tests may wire anything).
func TestLayering(t *testing.T) {
	const mod = "github.com/bailinghub/knowledge-sidecar/"
	rules := []struct {
		dir string
		// ours: the only packages of this module it may import (nil: any
		// but the forbidden ones); stdOnly: nothing outside the standard library.
		ours      []string
		stdOnly   bool
		forbidden []string // import paths (or prefixes ending in /) it must not import
	}{
		{dir: "protocol", stdOnly: true},
		{dir: "corefacts", stdOnly: true},
		{dir: "corefacts/jsstring", stdOnly: true},
		{dir: "internal/jsonscan", stdOnly: true},
		// The metric helpers every package shares: the Prometheus client only.
		{dir: "internal/prom", ours: []string{}},
		{dir: "corelink", stdOnly: true},
		{dir: "knowledge", ours: []string{"corefacts", "corefacts/jsstring", "corelink", "internal/prom", "protocol"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		{dir: "turn", ours: []string{"corefacts", "corefacts/jsstring", "internal/jsonscan", "internal/prom", "knowledge", "ledger", "protocol"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		{dir: "coreclient", forbidden: []string{mod + "catalog", mod + "knowledge", mod + "proxy", mod + "turn", mod + "ledger", mod + "sidecar"}},
		{dir: "catalog", forbidden: []string{mod + "coreclient", mod + "knowledge", mod + "proxy", mod + "turn", mod + "ledger", mod + "sidecar"}},
		{dir: "breaker", ours: []string{"corefacts", "internal/prom", "telemetry"}},
		{dir: "rollout", ours: []string{"corefacts"}},
		{dir: "native", ours: []string{"corefacts", "internal/prom", "protocol"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		// The edge reaches Core's adapters only through the decisions:
		// proxy → knowledge, turn, native → coreclient, catalog. It is handed
		// its parts built (package sidecar assembles them): no ledger, no
		// host client, no configuration, no MCP server (it hands admitted
		// requests to an MCPHandler).
		{dir: "proxy", forbidden: []string{mod + "coreclient", mod + "catalog", mod + "breaker", mod + "sidecar", mod + "hostclient",
			mod + "ledger", mod + "config", mod + "mcpserver"}},
		{dir: "audit", ours: []string{"corefacts/jsstring", "internal/prom", "knowledge", "protocol"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		// The checker is the independent oracle: its own copy of the wire
		// facts (conformance/oracle.go), never package protocol's.
		{dir: "conformance", ours: []string{"hostclient"}},
		// The tools serve the stdio command and the remote endpoint alike:
		// the edge hands them a Backend, they never reach back into it nor
		// into the implementation behind it.
		{dir: "mcpserver", forbidden: []string{mod + "knowledge", mod + "proxy", mod + "coreclient", mod + "catalog", mod + "breaker",
			mod + "ledger", mod + "turn", mod + "sidecar", "github.com/labstack/echo/"}},
		// The Redis the replicas share knows no ledger, limit or protocol;
		// the ledger keeps its backends only and takes a client from it.
		{dir: "sharedredis", ours: []string{}},
		// The OAuth front decides (SPEC §12): Core's Agent Auth through a
		// small interface, no edge types.
		{dir: "mcpauth", ours: []string{"corefacts"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		{dir: "ledger", ours: []string{"internal/prom", "sharedredis"}},
		// The Core double follows Core's facts, never the sidecar's code; the
		// binary links it (demo), so nothing of it may come from test/.
		{dir: "internal/fakecore", ours: []string{"corefacts", "corefacts/jsstring", "protocol"}},
		// The throwaway Core database the binary's demo --sql makes: no test
		// code, nothing of the sidecar.
		{dir: "internal/coredb", ours: []string{}, forbidden: []string{"testing"}},
		{dir: "cmd/knowledge-sidecar", forbidden: []string{mod + "test/", mod + "internal/testkit/", "testing"}},
	}
	// config is read by the binary, the builder and the tests only: every
	// other package declares its own options and defaults, and config's
	// Defaults is built from them (so config imports them, never the reverse).
	configUsers := regexp.MustCompile(`^(cmd/.*|sidecar|test(/.*)?)$`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		if strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if pkg, err := build.ImportDir(path, 0); err == nil && !configUsers.MatchString(rel) && slices.Contains(pkg.Imports, mod+"config") {
			t.Errorf("%s imports %sconfig; want only cmd/..., sidecar and test/... to", rel, mod)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		pkg, err := build.ImportDir(filepath.Join("..", r.dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", r.dir, err)
		}
		for _, imp := range pkg.Imports {
			std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
			switch {
			case r.stdOnly && !std:
				t.Errorf("%s imports %s; want the standard library only", r.dir, imp)
			case r.ours != nil && strings.HasPrefix(imp, mod) && !slices.Contains(r.ours, strings.TrimPrefix(imp, mod)):
				t.Errorf("%s imports %s; want only %v of this module", r.dir, imp, r.ours)
			}
			for _, f := range r.forbidden {
				if imp == f || strings.HasSuffix(f, "/") && strings.HasPrefix(imp, f) {
					t.Errorf("%s imports %s; the layering forbids it", r.dir, imp)
				}
			}
		}
	}
}

// TestWireFactsOnce keeps the protocol's names in one place (DESIGN item 13):
// no non-test Go file spells the protocol name or a schema_version name as a
// string literal, except package protocol, which defines them, and the
// checker's independent oracle, conformance/oracle.go. Everything else uses
// the constants of package protocol.
func TestWireFactsOnce(t *testing.T) {
	// The protocol name and every bailing.agent-knowledge-*.v1 schema name,
	// alone or inside a larger literal (a JSON prefix, a message).
	wire := regexp.MustCompile(`bailing\.agent-knowledge(-[a-z]+)?\.v1`)
	allowed := map[string]bool{"conformance/oracle.go": true}
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "protocol" || rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || allowed[rel] {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && wire.MatchString(s) {
				t.Errorf("%s: string literal %s spells a wire name; want a constant of package protocol", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
