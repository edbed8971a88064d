package sidecar

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayering keeps the import rules of docs/architecture.md true: data
// flows one way (edge → decisions → adapters), every layer speaks in
// corefacts, which does no I/O, and the two adapters of Core know nothing of
// each other. Only non-test files count (tests may wire anything).
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
		{dir: "corefacts", stdOnly: true},
		{dir: "corefacts/jsstring", stdOnly: true},
		{dir: "internal/jsonscan", stdOnly: true},
		{dir: "knowledge", ours: []string{"config", "corefacts", "corefacts/jsstring", "internal/jsonscan"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		{dir: "turn", ours: []string{"corefacts", "corefacts/jsstring", "internal/jsonscan", "knowledge", "ledger"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		{dir: "coreclient", forbidden: []string{mod + "catalog", mod + "knowledge", mod + "proxy", mod + "turn", mod + "ledger", mod + "sidecar"}},
		{dir: "catalog", forbidden: []string{mod + "coreclient", mod + "knowledge", mod + "proxy", mod + "turn", mod + "ledger", mod + "sidecar"}},
		{dir: "breaker", ours: []string{"config", "corefacts", "telemetry"}},
		{dir: "rollout", ours: []string{"corefacts"}},
		{dir: "native", ours: []string{"config", "corefacts"},
			forbidden: []string{"github.com/labstack/echo/", "net/http/httputil"}},
		// The edge reaches Core's adapters only through the decisions:
		// proxy → knowledge, turn, native → coreclient, catalog.
		{dir: "proxy", forbidden: []string{mod + "coreclient", mod + "catalog", mod + "breaker", mod + "sidecar"}},
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
