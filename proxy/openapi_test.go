package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const turnsPath = "/agent-api/v1/workspaces/{route}/turns"

// loadOpenAPI parses docs/openapi.yaml as a generic tree.
func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc
}

// lookup resolves a local JSON pointer such as #/components/schemas/Hint.
func lookup(doc map[string]any, ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	var node any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]; !ok {
			return nil, false
		}
	}
	return node, true
}

// deref follows $ref until a node without one.
func deref(doc map[string]any, node any) map[string]any {
	for i := 0; i < 10; i++ {
		m, _ := node.(map[string]any)
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		node, _ = lookup(doc, ref)
	}
	return nil
}

// TestOpenAPIValid checks the structure OpenAPI 3.1 requires of the file:
// every $ref resolves, operation ids are unique, every operation has
// responses keyed by status (or default), each with a description.
func TestOpenAPIValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v; want 3.1.0", doc["openapi"])
	}
	if info, _ := doc["info"].(map[string]any); info["title"] == nil || info["version"] == nil {
		t.Error("info needs title and version")
	}
	var walk func(path string, node any)
	walk = func(path string, node any) {
		switch n := node.(type) {
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				if _, found := lookup(doc, ref); !found {
					t.Errorf("%s: $ref %s does not resolve", path, ref)
				}
			}
			for k, v := range n {
				walk(path+"/"+k, v)
			}
		case []any:
			for i, v := range n {
				walk(path+"/"+strconv.Itoa(i), v)
			}
		}
	}
	walk("#", doc)

	status := regexp.MustCompile(`^[1-5][0-9]{2}$`)
	ids := map[string]string{}
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		ops, _ := item.(map[string]any)
		for method, op := range ops {
			o, _ := op.(map[string]any)
			id, _ := o["operationId"].(string)
			if id == "" || ids[id] != "" {
				t.Errorf("%s %s: operationId %q missing or not unique", method, p, id)
			}
			ids[id] = p
			responses, _ := o["responses"].(map[string]any)
			if len(responses) == 0 {
				t.Errorf("%s %s: no responses", method, p)
			}
			for code, res := range responses {
				if code != "default" && !status.MatchString(code) {
					t.Errorf("%s %s: response key %q", method, p, code)
				}
				if d, _ := deref(doc, res)["description"].(string); d == "" {
					t.Errorf("%s %s %s: no description", method, p, code)
				}
			}
		}
	}
}

// turnHandlerAnswers collects, from the source of the turn handler (the
// proxy's turn*.go files), every status it writes itself: literal statuses
// passed to writeError/writeJSON or set in an error value, error variables of
// the package it names, and the statuses of the knowledge errors relayed from
// the identity check. It also returns the error codes written literally.
func turnHandlerAnswers(t *testing.T) (statuses map[int]bool, codes map[string]bool) {
	t.Helper()
	statuses, codes = map[int]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	httpStatus := func(e ast.Expr) (int, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return 0, false
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "http" || !strings.HasPrefix(sel.Sel.Name, "Status") {
			return 0, false
		}
		for code := 100; code < 600; code++ {
			if name := http.StatusText(code); name != "" && "Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(name) == sel.Sel.Name {
				return code, true
			}
		}
		return 0, false
	}
	// literalStatuses: statuses set in composite literals ({Status: …} or {status: …}) below n.
	literalStatuses := func(n ast.Node) []int {
		var out []int
		ast.Inspect(n, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && strings.EqualFold(k.Name, "status") {
					if code, ok := httpStatus(kv.Value); ok {
						out = append(out, code)
					}
				}
			}
			return true
		})
		return out
	}
	files := parseSources(t, fset, "*.go")
	// Package-level error values and the statuses they carry.
	errVars := map[string][]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							errVars[id.Name] = literalStatuses(vs.Values[i])
						}
					}
				}
			}
		}
	}
	callsAuthenticate, scanned := false, 0
	for name, f := range files {
		if !strings.HasPrefix(name, "turn") {
			continue
		}
		scanned++
		for _, s := range literalStatuses(f) {
			statuses[s] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				for _, s := range errVars[n.Name] {
					statuses[s] = true
				}
			case *ast.CallExpr:
				name := ""
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if name == "Authenticate" {
					callsAuthenticate = true
				}
				if (name == "writeError" || name == "writeJSON") && len(n.Args) >= 3 {
					if code, ok := httpStatus(n.Args[1]); ok {
						statuses[code] = true
					}
					if lit, ok := n.Args[2].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						c, _ := strconv.Unquote(lit.Value)
						codes[c] = true
					}
				}
			case *ast.ValueSpec:
				// A fixed error body such as the 409 turn_conflict.
				for i, id := range n.Names {
					if strings.HasSuffix(id.Name, "Body") && i < len(n.Values) {
						if m := regexp.MustCompile(`"error":"([a-z_]+)"`).FindStringSubmatch(exprText(n.Values[i])); m != nil {
							codes[m[1]] = true
						}
					}
				}
			}
			return true
		})
	}
	if scanned == 0 {
		t.Fatal("no turn*.go source in package proxy")
	}
	if callsAuthenticate {
		for _, s := range knowledgeStatuses(t, "Authenticate") {
			statuses[s] = true
		}
	}
	return statuses, codes
}

func exprText(e ast.Expr) string {
	var b strings.Builder
	ast.Inspect(e, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := strconv.Unquote(lit.Value)
			b.WriteString(s)
		}
		return true
	})
	return b.String()
}

// parseSources parses the Go files matching pattern, tests left out: file
// name → syntax tree.
func parseSources(t *testing.T, fset *token.FileSet, pattern string) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return files
}

// knowledgeStatuses returns the statuses of the err* constructors of package
// knowledge that the method fn calls.
func knowledgeStatuses(t *testing.T, fn string) []int {
	t.Helper()
	fset := token.NewFileSet()
	files := parseSources(t, fset, "../knowledge/*.go")
	ctor := map[string]int{} // errX → status of its newError call
	var body *ast.BlockStmt
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Name.Name == fn && fd.Recv != nil {
				body = fd.Body
			}
			if strings.HasPrefix(fd.Name.Name, "err") {
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if c, ok := n.(*ast.CallExpr); ok {
						if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "newError" && len(c.Args) > 0 {
							if lit, ok := c.Args[0].(*ast.BasicLit); ok {
								ctor[fd.Name.Name], _ = strconv.Atoi(lit.Value)
							}
						}
					}
					return true
				})
			}
		}
	}
	if body == nil {
		t.Fatalf("knowledge has no method %s", fn)
	}
	var out []int
	ast.Inspect(body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && ctor[id.Name] != 0 {
				out = append(out, ctor[id.Name])
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("found no error constructor in knowledge.%s", fn)
	}
	return out
}

// TestOpenAPIDocumentsTurnAnswers: every status the turn handler produces
// itself is documented for the turns path with its code, and the extension's
// request field and delivery block are described.
func TestOpenAPIDocumentsTurnAnswers(t *testing.T) {
	doc := loadOpenAPI(t)
	op := deref(doc, mustGet(t, doc, "paths", turnsPath, "post"))
	responses, _ := op["responses"].(map[string]any)
	statuses, codes := turnHandlerAnswers(t)
	// The answers of the extension (the list), whatever the source
	// layout, and everything the scan finds.
	for _, s := range []int{400, 401, 409, 502, 503} {
		statuses[s] = true
	}
	opText, _ := yaml.Marshal(op)
	for s := range statuses {
		if _, ok := responses[strconv.Itoa(s)]; !ok {
			t.Errorf("the turn handler answers %d; openapi.yaml does not document it for POST %s", s, turnsPath)
		}
	}
	for c := range codes {
		if !strings.Contains(string(opText), c) {
			t.Errorf("the turn handler answers error %q; openapi.yaml does not name it for POST %s", c, turnsPath)
		}
	}
	req := deref(doc, mustGet(t, op, "requestBody", "content", "application/json", "schema"))
	kd, _ := deref(doc, mustGet(t, req, "properties", "knowledge_delivery"))["enum"].([]any)
	if len(kd) != 2 || kd[0] != "inline" || kd[1] != "on_demand" {
		t.Errorf("knowledge_delivery enum %v; want [inline on_demand]", kd)
	}
	ctx := deref(doc, mustGet(t, responses, "200", "content", "application/json", "schema"))
	block := deref(doc, mustGet(t, ctx, "properties", "knowledge_delivery"))
	if v := deref(doc, mustGet(t, block, "properties", "schema_version"))["const"]; v != "bailing.agent-knowledge-delivery.v1" {
		t.Errorf("delivery block schema_version %v", v)
	}
	hints := deref(doc, mustGet(t, block, "properties", "hints"))
	if item := deref(doc, hints["items"]); item == nil || mustGet(t, item, "properties", "ref") == nil {
		t.Error("delivery hints are not described as search hints")
	}
}

// TestOpenAPIDocumentsKnowledgeAnswers: every status a knowledge error can
// carry is documented on the search or read endpoint.
func TestOpenAPIDocumentsKnowledgeAnswers(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for _, ep := range []string{"search", "read"} {
		op := deref(doc, mustGet(t, doc, "paths", "/agent-api/v1/workspaces/{route}/knowledge/"+ep, "post"))
		responses, _ := op["responses"].(map[string]any)
		for code := range responses {
			documented[code] = true
		}
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../knowledge/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		if c, ok := node.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "newError" && len(c.Args) > 0 {
				if lit, ok := c.Args[0].(*ast.BasicLit); ok && lit.Kind == token.INT {
					n++
					if !documented[lit.Value] {
						t.Errorf("knowledge answers %s; openapi.yaml documents it on neither search nor read", lit.Value)
					}
				}
			}
		}
		return true
	})
	if n == 0 {
		t.Fatal("found no knowledge error constructor")
	}
}

func mustGet(t *testing.T, node any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := node.(map[string]any)
		if !ok {
			t.Fatalf("openapi.yaml: no %q (path %v)", k, keys)
		}
		if node, ok = m[k]; !ok {
			t.Fatalf("openapi.yaml: no %q (path %v)", k, keys)
		}
	}
	return node
}
