package mcpserver

import (
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestAdviceWaitsInGoodEnglish: the rate_limited advice counts seconds.
func TestAdviceWaitsInGoodEnglish(t *testing.T) {
	for retryAfter, want := range map[string]string{
		"1": "Wait 1 second, then retry the same call.",
		"7": "Wait 7 seconds, then retry the same call.",
		"":  "Wait a few seconds, then retry the same call.",
		"0": "Wait a few seconds, then retry the same call.",
	} {
		if got := Advice("rate_limited", retryAfter); got != want {
			t.Errorf("Retry-After %q: %q; want %q", retryAfter, got, want)
		}
	}
}

// TestExplainSchemaErrors: schema problems read as plain English, integers
// as integers, for every keyword the two tools use.
func TestExplainSchemaErrors(t *testing.T) {
	tools := map[string]ToolDef{}
	for _, d := range Tools() {
		tools[d.Name] = d
	}
	search, read := tools[protocol.SearchTool].properties(), tools[protocol.ReadTool].properties()
	for _, tc := range []struct {
		name string
		def  ToolDef
		inst any
		want string
	}{
		{"not an object", tools[protocol.SearchTool], []any{1}, "they must be a JSON object"},
		{"above maximum", tools[protocol.SearchTool], map[string]any{"query": "q", "limit": 7.0}, "limit must be between 1 and 3 (got 7)"},
		{"below minimum", tools[protocol.ReadTool], map[string]any{"ref": "r", "max_bytes": 4095.0}, "max_bytes must be between 4096 and 32768 (got 4095)"},
		{"fraction", tools[protocol.SearchTool], map[string]any{"query": "q", "limit": 2.5}, "limit must be a whole number"},
		{"string for integer", tools[protocol.SearchTool], map[string]any{"query": "q", "limit": "2"}, "limit must be a whole number"},
		{"missing", tools[protocol.ReadTool], map[string]any{}, "ref is required"},
		{"too long", tools[protocol.ReadTool], map[string]any{"ref": strings.Repeat("é", 513)}, "ref must be at most 512 characters long (it has 513)"},
		{"wrong type", tools[protocol.SearchTool], map[string]any{"query": 5.0}, "query must be a string"},
		{"unknown", tools[protocol.ReadTool], map[string]any{"ref": "r", "page": 2.0}, "page is not an argument of this tool (it takes cursor, max_bytes, near, ref, run_id)"},
		{"pattern", tools[protocol.ReadTool], map[string]any{"ref": "r", "run_id": "nope"}, "run_id must be a UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := tc.def.resolve()
			if err != nil {
				t.Fatal(err)
			}
			if rs.Validate(tc.inst) == nil {
				t.Fatalf("precondition: %v passes the schema", tc.inst)
			}
			if got := explain(tc.def.properties(), tc.inst); !strings.Contains(got, tc.want) {
				t.Errorf("explain: %q; want %q", got, tc.want)
			}
		})
	}
	if search == nil || read == nil {
		t.Fatal("the tool schemas do not parse")
	}
}
