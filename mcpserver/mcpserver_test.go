package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestProtocolDocShowsTheTools: docs/protocol.md §2 shows exactly the tool
// definitions the server serves.
func TestProtocolDocShowsTheTools(t *testing.T) {
	raw, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(\\{\n  \"name\": \"knowledge_.*?)\n```").FindAllSubmatch(raw, -1)
	tools := Tools()
	if len(blocks) != len(tools) {
		t.Fatalf("protocol.md has %d tool blocks; want %d", len(blocks), len(tools))
	}
	for i, b := range blocks {
		var doc, src any
		if err := json.Unmarshal(b[1], &doc); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		srcRaw, _ := json.Marshal(tools[i])
		_ = json.Unmarshal(srcRaw, &src)
		x, _ := json.Marshal(doc)
		y, _ := json.Marshal(src)
		if !bytes.Equal(x, y) {
			t.Errorf("protocol.md block %d:\n got %s\nwant %s (mcpserver/tools.go)", i, x, y)
		}
	}
}

// TestSchemasAreExact: only the documented properties, closed, with bounds.
func TestSchemasAreExact(t *testing.T) {
	want := map[string][]string{protocol.SearchTool: {"limit", "query", "run_id"}, protocol.ReadTool: {"cursor", "max_bytes", "near", "ref", "run_id"}}
	for _, def := range Tools() {
		rs, err := def.resolve()
		if err != nil {
			t.Fatal(err)
		}
		s := rs.Schema()
		props := slices.Sorted(maps.Keys(s.Properties))
		if strings.Join(props, ",") != strings.Join(want[def.Name], ",") || s.AdditionalProperties == nil {
			t.Errorf("%s: properties %v, additionalProperties %v; want %v and false", def.Name, props, s.AdditionalProperties, want[def.Name])
		}
		cases := map[string][]map[string]any{
			protocol.SearchTool: {{"query": ""}, {"query": "x", "limit": 0}, {"query": "x", "limit": 4}, {"query": "x", "extra": 1}, {}},
			protocol.ReadTool:   {{"ref": ""}, {"ref": strings.Repeat("a", 513)}, {"ref": "a", "cursor": strings.Repeat("a", 513)}, {"ref": "a", "max_bytes": 4095}, {"ref": "a", "max_bytes": 32769}, {"ref": "a", "run_id": "x"}, {"ref": "a", "near": ""}, {"ref": "a", "near": strings.Repeat("é", 201)}},
		}
		for _, bad := range cases[def.Name] {
			if rs.Validate(bad) == nil {
				t.Errorf("%s accepts %v; want it refused", def.Name, bad)
			}
		}
		good := map[string]map[string]any{protocol.SearchTool: {"query": strings.Repeat("é", 2000), "limit": 3}, protocol.ReadTool: {"ref": "a", "max_bytes": 32768, "run_id": "0B9A3E2C-3C1D-4F7E-9A55-1E2D3C4B5A69"}}
		if err := rs.Validate(good[def.Name]); err != nil {
			t.Errorf("%s refuses %v: %v", def.Name, good[def.Name], err)
		}
	}
}

// TestResult: protocol errors become isError results whose text starts with
// the code and says what to do next, with one text item and no structured
// content; never a JSON-RPC error.
func TestResult(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name    string
		status  int
		header  http.Header
		body    string
		isError bool
		prefix  string
		next    string
	}{
		{"success", 200, nil, searchAnswer("ok", 1), false, "1 hint; read one with knowledge_read", "ref: kr1.ref-0"},
		{"another schema", 200, nil, `{"schema_version":"bailing.agent-knowledge-read.v1"}`, true, "knowledge_unavailable: ", "temporarily unavailable"},
		{"not protocol JSON", 200, nil, `<html>`, true, "knowledge_unavailable: ", "temporarily unavailable"},
		{"400 invalid", 400, nil, `{"error":"invalid_request","message":"limit must be 1–3."}`, true, "invalid_request: limit must be 1–3. ", "Fix the arguments"},
		{"400 ref", 400, nil, `{"error":"knowledge_reference_invalid","message":"The knowledge reference is invalid."}`, true, "knowledge_reference_invalid: ", "Search again"},
		{"401", 401, nil, `{"error":"unauthorized","message":"x"}`, true, "unauthorized: ", "give up"},
		{"403", 403, nil, `{"error":"audience_not_allowed","message":"x"}`, true, "audience_not_allowed: ", "Give up"},
		{"404 route", 404, nil, `{"error":"route_unavailable","message":"x"}`, true, "route_unavailable: ", "Give up"},
		{"404 run", 404, nil, `{"error":"run_not_found","message":"x"}`, true, "run_not_found: ", "current run"},
		{"409 changed", 409, nil, `{"error":"knowledge_changed","message":"x"}`, true, "knowledge_changed: ", "Search again"},
		{"409 task", 409, nil, `{"error":"TASK_PAUSED","message":"The governed task operation could not be accepted."}`, true, "TASK_PAUSED: ", "give up"},
		{"410", 410, nil, `{"error":"knowledge_reference_expired","message":"x"}`, true, "knowledge_reference_expired: ", "Search again"},
		{"413", 413, nil, `{"error":"payload_too_large","message":"x"}`, true, "payload_too_large: ", "Shorten"},
		{"429", 429, hdr("Retry-After", "7"), `{"error":"rate_limited","message":"x"}`, true, "rate_limited: ", "Wait 7 seconds"},
		{"429 without Retry-After", 429, nil, `{"error":"rate_limited","message":"x"}`, true, "rate_limited: ", "Wait a few seconds"},
		{"503", 503, nil, `{"error":"knowledge_unavailable","message":"x"}`, true, "knowledge_unavailable: ", "wait and retry later"},
		{"502 without a body", 502, nil, `bad gateway`, true, "http_502: ", "wait and retry later"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header
			if h == nil {
				h = http.Header{}
			}
			cs := connect(t, Options{Backend: fakeBackend(func(string, []byte) (*hostclient.Response, error) {
				return &hostclient.Response{Status: tc.status, Header: h, Body: []byte(tc.body)}, nil
			})})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": "q"}})
			if err != nil {
				t.Fatalf("a JSON-RPC error %v; want a tool result", err)
			}
			if len(res.Content) != 1 {
				t.Errorf("%d content items; want 1", len(res.Content))
			}
			var txt string
			for _, c := range res.Content {
				txt += c.(*mcp.TextContent).Text
			}
			if res.IsError != tc.isError || !strings.HasPrefix(txt, tc.prefix) || !strings.Contains(txt, tc.next) {
				t.Errorf("got isError %v %q; want %v starting %q containing %q", res.IsError, txt, tc.isError, tc.prefix, tc.next)
			}
			if !tc.isError && res.StructuredContent == nil {
				t.Error("success without structured content")
			}
			if tc.isError && res.StructuredContent != nil {
				t.Errorf("error result with structured content %v; want none (hosts validate it against the output schema)", res.StructuredContent)
			}
		})
	}
}

// TestProbe classifies capabilities answers.
func TestProbe(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   Support
	}{
		{200, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","supported":true,"enabled":true}`, Supported},
		{200, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","supported":true,"enabled":false}`, Supported},
		{200, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","supported":false,"enabled":true}`, Unsupported},
		{200, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","enabled":true}`, Unsupported},
		{200, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","supported":"true","enabled":true}`, Unsupported},
		{200, `{"schema_version":"something-else"}`, Unsupported},
		{404, `{"error":"not_found"}`, Unsupported},
		{405, ``, Unsupported},
		{501, ``, Unsupported},
		{401, `{"error":"unauthorized"}`, Unknown},
		{403, `{"error":"route_not_allowed"}`, Unknown},
		{429, `{"error":"rate_limited"}`, Unknown},
		{503, `{"error":"knowledge_unavailable"}`, Unknown},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer bha_t" || !strings.HasSuffix(r.URL.Path, "/workspaces/demo/knowledge/capabilities") {
				t.Errorf("probe sent %s %s", r.Header.Get("Authorization"), r.URL.Path)
			}
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		c, _ := hostclient.New(srv.URL, "demo", "bha_t", nil)
		if got, detail := Probe(context.Background(), c); got != tc.want || detail == "" {
			t.Errorf("%d %s: got %v %q; want %v with a reason", tc.status, tc.body, got, detail, tc.want)
		}
		srv.Close()
	}
}
