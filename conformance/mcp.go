package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// MCPProtocolVersion is the MCP revision the checker negotiates (an
// initialize-era revision every SPEC §10 endpoint accepts).
const MCPProtocolVersion = "2025-06-18"

// KnownGaps are MCP checks this sidecar is known to fail until the named
// issue lands. A failure of one of them is reported as a failure like any
// other (the exit code is 1); the detail says which issue it waits for, so
// that a host author can tell a known gap of this implementation from a
// new one. Remove an entry when its issue lands.
var KnownGaps = map[string]string{}

// mcpMaxPages bounds the read chain the checker follows (128 KiB in pages of
// at least 4 KiB is 32; more is a chain that does not end).
const mcpMaxPages = 40

// RunMCP checks the route's remote MCP endpoint (SPEC §10) black-box:
// authentication and its challenge, initialize, the tools (titles,
// annotations, schemas, descriptions), results written for the model with
// structuredContent valid against outputSchema, a read chain paged to its
// end, near, a tampered ref as a tool error, refusals as JSON-RPC errors,
// no-store, JSON answers and no session. Errors as Run's.
func RunMCP(ctx context.Context, o Options) (*Report, error) {
	r, err := newRunner(o, Protocol+" MCP")
	if err != nil {
		return nil, err
	}
	m := &mcpRun{runner: r, tools: map[string]mcpTool{}}
	err = m.all(ctx)
	m.flushGaps()
	return r.finish(err)
}

type mcpRun struct {
	*runner
	version string             // the negotiated protocol version
	tools   map[string]mcpTool // by name
	answers []*hostclient.Response
	id      int
}

type mcpTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  *struct {
		ReadOnlyHint    *bool `json:"readOnlyHint"`
		IdempotentHint  *bool `json:"idempotentHint"`
		DestructiveHint *bool `json:"destructiveHint"`
		OpenWorldHint   *bool `json:"openWorldHint"`
	} `json:"annotations"`
}

// rpcAnswer is a JSON-RPC response.
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// toolResult is a tools/call result.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (t *toolResult) text() string {
	if len(t.Content) == 0 || t.Content[0].Type != "text" {
		return ""
	}
	return t.Content[0].Text
}

// Check names and rules of the MCP mode.
const (
	cUnauth      = "mcp-401-challenge"
	cInit        = "mcp-initialize"
	cStateless   = "mcp-stateless"
	cNoStore     = "mcp-no-store"
	cJSON        = "mcp-json-answers"
	cToolsList   = "mcp-tools-list"
	cTitles      = "mcp-tool-titles"
	cAnnotations = "mcp-tool-annotations"
	cSchemas     = "mcp-tool-schemas"
	cDescr       = "mcp-tool-descriptions"
	cSearch      = "mcp-search-result"
	cStructured  = "mcp-structured-valid"
	cStandalone  = "mcp-text-names-refs"
	cRead        = "mcp-read-result"
	cLocation    = "mcp-read-location"
	cChain       = "mcp-read-chain"
	cNear        = "mcp-near"
	cTamper      = "mcp-tampered-ref"
	cRPCErrors   = "mcp-jsonrpc-errors"
	cMethods     = "mcp-get-delete-405"
	cTooLarge    = "mcp-body-413"
)

var mcpRules = map[string]string{
	cUnauth:      "a request without a bearer is 401 with WWW-Authenticate: Bearer (§10)",
	cInit:        "initialize answers a supported protocol version, serverInfo and the tools capability (§10)",
	cStateless:   "stateless: no Mcp-Session-Id is issued, and requests without one are served (§10)",
	cNoStore:     "every answer, refusals included, is Cache-Control: no-store (§10)",
	cJSON:        "answers are application/json JSON-RPC, never SSE or plain text (§10)",
	cToolsList:   "tools/list offers knowledge_search and knowledge_read (§10)",
	cTitles:      "each tool has a title (§10)",
	cAnnotations: "annotations readOnlyHint, idempotentHint true; destructiveHint, openWorldHint false (§10)",
	cSchemas:     "each tool has an object inputSchema (query; ref, cursor, near) and an outputSchema (§10)",
	cDescr:       "descriptions state that refs live 5 minutes and a read chain ends at 128 KiB (§10)",
	cSearch:      "a search result is a short text rendering, not raw JSON, with structuredContent (hints, note) (§10)",
	cStructured:  "structuredContent of every successful call is valid against the tool's outputSchema (§10)",
	cStandalone:  "the search text names each hint's title and ref (§10: results stand alone)",
	cRead:        "a read result shows the page text and, with more to come, the exact next call (ref and cursor) (§10)",
	cLocation:    "a read result that shows text states where it is: bytes A–B of T, or the page's size and T (§10)",
	cChain:       "a read chain pages by next_cursor to its end within 128 KiB of content (§5, §10)",
	cNear:        "knowledge_read with near (a summary's passage) returns the page where it occurs (§10)",
	cTamper:      "a tampered ref is a tool result with isError naming knowledge_reference_invalid, not a JSON-RPC error (§10)",
	cRPCErrors:   "malformed JSON is -32700 and an unknown method -32601, as JSON-RPC error objects (§10)",
	cMethods:     "GET and DELETE are 405 (§10)",
	cTooLarge:    "a request body over 64 KiB is 413 (§10)",
}

func (m *mcpRun) check(name, violation string) { m.note(name, mcpRules[name], violation) }
func (m *mcpRun) skipCheck(name, why string)   { m.skip(name, mcpRules[name], why) }

// flushGaps flushes the results, naming the issue a known gap waits for.
func (m *mcpRun) flushGaps() {
	m.flush()
	for i, c := range m.rep.Checks {
		if gap, ok := KnownGaps[c.Name]; ok && c.Status == Fail {
			m.rep.Checks[i].Detail = "KNOWN GAP of knowledge-sidecar, " + gap + ": " + c.Detail
		}
	}
}

func (m *mcpRun) endpoint() string { return m.c.URL(m.c.Route(), mcpEndpoint) }

// raw sends one request to the MCP endpoint and records its answer for the
// common checks.
func (m *mcpRun) raw(ctx context.Context, method string, body []byte, token bool, what string) (*hostclient.Response, error) {
	h := http.Header{"Accept": {"application/json, text/event-stream"}}
	if m.version != "" {
		h.Set("MCP-Protocol-Version", m.version)
	}
	req := hostclient.Request{Method: method, URL: m.endpoint(), Body: body, Header: h}
	if token {
		req.Token = m.c.Token()
	}
	res, err := m.send(ctx, req, "mcp "+what, false)
	if err == nil {
		m.answers = append(m.answers, res)
	}
	return res, err
}

// rpc sends a JSON-RPC request with the token and decodes the answer (nil
// when the answer is not JSON-RPC: the violation is recorded under name).
func (m *mcpRun) rpc(ctx context.Context, name, method string, params any) (*hostclient.Response, *rpcAnswer, error) {
	m.id++
	body := marshal(map[string]any{"jsonrpc": "2.0", "id": m.id, "method": method, "params": params})
	res, err := m.raw(ctx, http.MethodPost, body, true, method)
	if err != nil {
		return nil, nil, m.lost(err, name, mcpRules[name])
	}
	var a rpcAnswer
	if res.Status != http.StatusOK || json.Unmarshal(res.Body, &a) != nil || a.JSONRPC != "2.0" {
		m.check(name, fmt.Sprintf("%s: got %s %.120q; want 200 and a JSON-RPC answer", method, codeOf(res), res.Body))
		return res, nil, nil
	}
	return res, &a, nil
}

// call sends tools/call and decodes the tool result (nil: recorded under name).
func (m *mcpRun) call(ctx context.Context, name, tool string, args map[string]any) (*toolResult, error) {
	_, a, err := m.rpc(ctx, name, "tools/call", map[string]any{"name": tool, "arguments": args})
	if err != nil || a == nil {
		return nil, err
	}
	var t toolResult
	if a.Error != nil || json.Unmarshal(a.Result, &t) != nil {
		m.check(name, fmt.Sprintf("tools/call %s: got %.160s; want a tool result", tool, compact(a.Error)))
		return nil, nil
	}
	if !t.IsError {
		m.structured(tool, &t)
	}
	return &t, nil
}

// structured checks a successful result's structuredContent against the
// tool's outputSchema.
func (m *mcpRun) structured(tool string, t *toolResult) {
	def, ok := m.tools[tool]
	if !ok || len(def.OutputSchema) == 0 {
		return
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(def.OutputSchema, &s); err != nil {
		m.check(cStructured, tool+": outputSchema does not decode: "+err.Error())
		return
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		m.check(cStructured, tool+": outputSchema does not resolve: "+err.Error())
		return
	}
	var inst any
	if len(t.StructuredContent) == 0 || json.Unmarshal(t.StructuredContent, &inst) != nil {
		m.check(cStructured, tool+": no structuredContent")
		return
	}
	if err := rs.Validate(inst); err != nil {
		m.check(cStructured, tool+": "+err.Error())
		return
	}
	m.check(cStructured, "")
}

func (m *mcpRun) all(ctx context.Context) error {
	if err := m.auth(ctx); err != nil {
		return err
	}
	if ok, err := m.initialize(ctx); err != nil || !ok {
		m.common()
		return err
	}
	steps := []func(context.Context) error{m.toolsList, m.searchAndRead, m.refusals}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	m.common()
	return nil
}

func (m *mcpRun) initBody() []byte {
	m.id++
	return marshal(map[string]any{"jsonrpc": "2.0", "id": m.id, "method": "initialize", "params": map[string]any{
		"protocolVersion": MCPProtocolVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "knowledge-sidecar-conformance", "version": "1"},
	}})
}

func (m *mcpRun) auth(ctx context.Context) error {
	res, err := m.raw(ctx, http.MethodPost, m.initBody(), false, "initialize without a bearer")
	if err != nil {
		return err // nothing answered yet: a connection error
	}
	if res.Status != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
		m.check(cUnauth, fmt.Sprintf("got %s, WWW-Authenticate %q; want 401 with a Bearer challenge", codeOf(res), res.Header.Get("WWW-Authenticate")))
		return nil
	}
	m.check(cUnauth, "")
	return nil
}

func (m *mcpRun) initialize(ctx context.Context) (bool, error) {
	res, err := m.raw(ctx, http.MethodPost, m.initBody(), true, "initialize")
	if err != nil {
		return false, m.lost(err, cInit, mcpRules[cInit])
	}
	if res.Status == http.StatusUnauthorized {
		return false, fmt.Errorf("%w (401 on initialize)", ErrRejected)
	}
	var a rpcAnswer
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		ServerInfo      struct {
			Name string `json:"name"`
		} `json:"serverInfo"`
		Capabilities struct {
			Tools *json.RawMessage `json:"tools"`
		} `json:"capabilities"`
	}
	if res.Status != http.StatusOK || json.Unmarshal(res.Body, &a) != nil || a.Error != nil || json.Unmarshal(a.Result, &init) != nil {
		m.check(cInit, fmt.Sprintf("got %s %.160q; want 200 with an initialize result", codeOf(res), res.Body))
		return false, nil
	}
	var bad []string
	if !slices.Contains(mcpVersions, init.ProtocolVersion) {
		bad = append(bad, fmt.Sprintf("protocolVersion %q for a %s request", init.ProtocolVersion, MCPProtocolVersion))
	}
	if init.ServerInfo.Name == "" {
		bad = append(bad, "no serverInfo.name")
	}
	if init.Capabilities.Tools == nil {
		bad = append(bad, "no tools capability")
	}
	m.check(cInit, strings.Join(bad, ", "))
	m.version = init.ProtocolVersion
	if m.version == "" {
		m.version = MCPProtocolVersion
	}
	return true, nil
}

func (m *mcpRun) toolsList(ctx context.Context) error {
	_, a, err := m.rpc(ctx, cToolsList, "tools/list", map[string]any{})
	if err != nil || a == nil {
		return err
	}
	var list struct {
		Tools []mcpTool `json:"tools"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &list) != nil {
		m.check(cToolsList, fmt.Sprintf("got %.160s; want a tools list", a.Result))
		return nil
	}
	for _, t := range list.Tools {
		m.tools[t.Name] = t
	}
	var missing []string
	for _, n := range []string{mcpSearchTool, mcpReadTool} {
		if _, ok := m.tools[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		m.check(cToolsList, "missing "+strings.Join(missing, ", "))
	} else {
		m.check(cToolsList, "")
	}
	props := map[string][]string{mcpSearchTool: {"query"}, mcpReadTool: {"ref", "cursor", "near"}}
	required := map[string]string{mcpSearchTool: "query", mcpReadTool: "ref"}
	for _, n := range []string{mcpSearchTool, mcpReadTool} {
		t, ok := m.tools[n]
		if !ok {
			continue
		}
		if t.Title == "" {
			m.check(cTitles, n+": no title")
		} else {
			m.check(cTitles, "")
		}
		an := t.Annotations
		if an == nil || !isTrue(an.ReadOnlyHint) || !isTrue(an.IdempotentHint) || an.DestructiveHint == nil || *an.DestructiveHint ||
			an.OpenWorldHint == nil || *an.OpenWorldHint {
			m.check(cAnnotations, n+": annotations "+compact(t.Annotations))
		} else {
			m.check(cAnnotations, "")
		}
		var in struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		var out struct {
			Type string `json:"type"`
		}
		var bad []string
		if json.Unmarshal(t.InputSchema, &in) != nil || in.Type != "object" {
			bad = append(bad, "inputSchema is not an object schema")
		}
		for _, p := range props[n] {
			if _, ok := in.Properties[p]; !ok {
				bad = append(bad, "inputSchema lacks "+p)
			}
		}
		if !slices.Contains(in.Required, required[n]) {
			bad = append(bad, "inputSchema does not require "+required[n])
		}
		if json.Unmarshal(t.OutputSchema, &out) != nil || out.Type != "object" {
			bad = append(bad, "no object outputSchema")
		}
		m.check(cSchemas, prefixed(n, bad))
		d := strings.ToLower(t.Description)
		bad = nil
		if !strings.Contains(d, mcpRefLifetime) {
			bad = append(bad, "does not say refs live 5 minutes")
		}
		if n == mcpReadTool && !strings.Contains(d, strings.ToLower(mcpChainText)) {
			bad = append(bad, "does not say a chain ends at 128 KiB")
		}
		m.check(cDescr, prefixed(n, bad))
	}
	return nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func compact(v any) string { b, _ := json.Marshal(v); return string(b) }

func prefixed(name string, bad []string) string {
	if len(bad) == 0 {
		return ""
	}
	return name + ": " + strings.Join(bad, ", ")
}

// mcpHint is a hint of a search's structuredContent.
type mcpHint struct {
	Ref     string `json:"ref"`
	Title   string `json:"title"`
	Summary string `json:"summary"`
}

// mcpPage is a read's structuredContent.
type mcpPage struct {
	Content           string  `json:"content"`
	NextCursor        *string `json:"next_cursor"`
	BudgetExhausted   bool    `json:"budget_exhausted"`
	TotalContentBytes int     `json:"total_content_bytes"`
	Note              string  `json:"note"`
}

// location is "bytes A–B of T" (digits with or without separators) or a
// page size "of T".
var location = regexp.MustCompile(`(?i)bytes?\s+[\d,.\s]+\s*[–-]\s*[\d,.\s]+\s+of\s+[\d,.\s]+|[\d,.]+\s*(bytes|KiB|B)\s+of\s+[\d,.]+`)

func (m *mcpRun) searchAndRead(ctx context.Context) error {
	if _, ok := m.tools[mcpSearchTool]; !ok {
		for _, c := range []string{cSearch, cStructured, cStandalone, cRead, cLocation, cChain, cNear, cTamper} {
			m.skipCheck(c, "the endpoint offers no knowledge_search")
		}
		return nil
	}
	hints, err := m.searchHints(ctx)
	if err != nil || len(hints) == 0 {
		return err
	}
	h := hints[0]
	if more, err := m.readChain(ctx, h); err != nil || !more {
		return err
	}
	if err := m.readNear(ctx, h); err != nil {
		return err
	}
	return m.readTampered(ctx, h)
}

// searchHints searches each query until one returns hints (checks search
// and standalone) and returns them; none when a check failed or the run
// stopped, or when no query found a hint (the checks that need one are
// skipped).
func (m *mcpRun) searchHints(ctx context.Context) ([]mcpHint, error) {
	queries := defaultQueries
	if m.o.Query != "" {
		queries = []string{m.o.Query}
	}
	var hints []mcpHint
	for _, q := range queries {
		t, err := m.call(ctx, cSearch, mcpSearchTool, map[string]any{"query": q})
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, nil
		}
		text := t.text()
		var sc struct {
			Hints []mcpHint `json:"hints"`
			Note  *string   `json:"note"`
		}
		var bad []string
		switch {
		case t.IsError:
			bad = append(bad, fmt.Sprintf("query %q: a tool error: %.160s", q, text))
		case text == "" || strings.HasPrefix(strings.TrimSpace(text), "{"):
			bad = append(bad, fmt.Sprintf("query %q: content[0].text %.80q; want a rendering, not raw JSON", q, text))
		case json.Unmarshal(t.StructuredContent, &sc) != nil || sc.Note == nil:
			bad = append(bad, fmt.Sprintf("query %q: structuredContent without hints and note", q))
		}
		m.check(cSearch, strings.Join(bad, "; "))
		if len(bad) > 0 {
			return nil, nil
		}
		if len(sc.Hints) > 0 {
			hints = sc.Hints
			var miss []string
			for _, h := range hints {
				if !strings.Contains(text, h.Ref) || !strings.Contains(text, h.Title) {
					miss = append(miss, "hint "+strconv.Quote(h.Title))
				}
			}
			if len(miss) > 0 {
				m.check(cStandalone, strings.Join(miss, ", ")+" not named with its ref in the text")
			} else {
				m.check(cStandalone, "")
			}
			break
		}
	}
	if len(hints) == 0 {
		for _, c := range []string{cStandalone, cRead, cLocation, cChain, cNear, cTamper} {
			m.skipCheck(c, "no search returned a hint (give --query)")
		}
	}
	return hints, nil
}

// readChain reads h's chain page by page to its end (checks read,
// location and chain); false when the run cannot go on.
func (m *mcpRun) readChain(ctx context.Context, h mcpHint) (bool, error) {
	cursor := ""
	total := 0
	for page := 1; ; page++ {
		args := map[string]any{"ref": h.Ref}
		if cursor != "" {
			args["cursor"] = cursor
		}
		t, err := m.call(ctx, cRead, mcpReadTool, args)
		if err != nil {
			return false, err
		}
		if t == nil {
			return false, nil
		}
		var p mcpPage
		text := t.text()
		if t.IsError || json.Unmarshal(t.StructuredContent, &p) != nil {
			m.check(cRead, fmt.Sprintf("page %d: %.160s", page, text))
			return false, nil
		}
		var bad []string
		if p.Content != "" && !strings.Contains(text, firstLine(p.Content)) {
			bad = append(bad, fmt.Sprintf("page %d: the text does not show the page", page))
		}
		if p.NextCursor != nil && (!strings.Contains(text, *p.NextCursor) || !strings.Contains(text, h.Ref)) {
			bad = append(bad, fmt.Sprintf("page %d: more follows but the text does not give the next call's ref and cursor", page))
		}
		m.check(cRead, strings.Join(bad, "; "))
		if p.Content != "" {
			if location.MatchString(text) && strings.Contains(digits(text), strconv.Itoa(p.TotalContentBytes)) {
				m.check(cLocation, "")
			} else {
				m.check(cLocation, fmt.Sprintf("page %d: the text does not say where the page is (bytes A–B of %d)", page, p.TotalContentBytes))
			}
		}
		total += len(p.Content)
		if total > chainMax {
			m.check(cChain, fmt.Sprintf("the chain returned %d bytes; want at most %d", total, chainMax))
			break
		}
		if p.NextCursor == nil || p.BudgetExhausted {
			m.check(cChain, "")
			break
		}
		if page == mcpMaxPages {
			m.check(cChain, fmt.Sprintf("the chain did not end after %d pages", page))
			break
		}
		cursor = *p.NextCursor
	}
	return true, nil
}

// readNear reads h near a passage of its summary (check near).
func (m *mcpRun) readNear(ctx context.Context, h mcpHint) error {
	if _, ok := m.tools[mcpReadTool]; ok {
		words := strings.Fields(h.Summary)
		if len(words) < 4 {
			m.skipCheck(cNear, "the hint's summary is too short to copy a passage from")
		} else {
			passage := strings.Join(words[:min(len(words), 8)], " ")
			t, err := m.call(ctx, cNear, mcpReadTool, map[string]any{"ref": h.Ref, "near": passage})
			if err != nil {
				return err
			}
			var p mcpPage
			switch {
			case t == nil:
			case t.IsError || json.Unmarshal(t.StructuredContent, &p) != nil || p.Content == "":
				m.check(cNear, fmt.Sprintf("near %q: %.160s", passage, t.text()))
			case !strings.Contains(collapse(p.Content), collapse(words[0]+" "+words[1])) && !strings.Contains(strings.ToLower(t.text()), "closest"):
				m.check(cNear, fmt.Sprintf("near %q: the page does not hold the passage", passage))
			default:
				m.check(cNear, "")
			}
		}
	}
	return nil
}

// readTampered reads a tampered ref: a tool error, never a JSON-RPC error
// (check tamper).
func (m *mcpRun) readTampered(ctx context.Context, h mcpHint) error {
	_, a, err := m.rpc(ctx, cTamper, "tools/call", map[string]any{"name": mcpReadTool, "arguments": map[string]any{"ref": tamper(h.Ref)}})
	if err != nil || a == nil {
		return err
	}
	var t toolResult
	switch {
	case a.Error != nil:
		m.check(cTamper, fmt.Sprintf("a JSON-RPC error %d; want a tool result with isError", a.Error.Code))
	case json.Unmarshal(a.Result, &t) != nil || !t.IsError || !strings.Contains(t.text(), codeReferenceInvalid):
		m.check(cTamper, fmt.Sprintf("got %.160s; want isError naming knowledge_reference_invalid", a.Result))
	case strings.Contains(t.text(), m.c.Token()):
		m.check(cTamper, "the error text holds the bearer")
	default:
		m.check(cTamper, "")
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[:min(len(l), 40)])
}

func collapse(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

// digits drops thousands separators, so "100,000" reads 100000.
func digits(s string) string {
	return separator.ReplaceAllString(separator.ReplaceAllString(s, "$1$2"), "$1$2") // twice: 1,234,567
}

var separator = regexp.MustCompile(`(\d)[,.\x{202F}\x{00A0}](\d{3})`)

// refusals: malformed JSON-RPC, an unknown method, GET and DELETE, an
// oversized body.
func (m *mcpRun) refusals(ctx context.Context) error {
	for _, c := range []struct {
		body, what string
		code       int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":`, "malformed JSON", -32700},
		{`{"jsonrpc":"2.0","id":1,"method":"no/such_method","params":{}}`, "an unknown method", -32601},
	} {
		res, err := m.raw(ctx, http.MethodPost, []byte(c.body), true, c.what)
		if err != nil {
			if err := m.lost(err, cRPCErrors, mcpRules[cRPCErrors]); err != nil {
				return err
			}
			continue
		}
		var a rpcAnswer
		if json.Unmarshal(res.Body, &a) != nil || a.Error == nil || a.Error.Code != c.code {
			m.check(cRPCErrors, fmt.Sprintf("%s: got %s %.100q; want a JSON-RPC error %d", c.what, codeOf(res), res.Body, c.code))
		} else {
			m.check(cRPCErrors, "")
		}
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		res, err := m.raw(ctx, method, nil, true, method)
		if err != nil {
			if err := m.lost(err, cMethods, mcpRules[cMethods]); err != nil {
				return err
			}
			continue
		}
		if res.Status != http.StatusMethodNotAllowed {
			m.check(cMethods, fmt.Sprintf("%s: got %s; want 405", method, codeOf(res)))
		} else {
			m.check(cMethods, "")
		}
	}
	big := bytes.Repeat([]byte(" "), mcpMaxBody+1)
	copy(big, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	res, err := m.raw(ctx, http.MethodPost, big, true, "a 64 KiB + 1 body")
	if err != nil {
		return m.lost(err, cTooLarge, mcpRules[cTooLarge])
	}
	if res.Status != http.StatusRequestEntityTooLarge {
		m.check(cTooLarge, fmt.Sprintf("got %s; want 413", codeOf(res)))
	} else {
		m.check(cTooLarge, "")
	}
	return nil
}

// common checks every answer of the run: no-store, JSON, no session id.
func (m *mcpRun) common() {
	for _, res := range m.answers {
		what := strconv.Itoa(res.Status)
		if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
			m.check(cNoStore, fmt.Sprintf("a %s answer has Cache-Control %q", what, cc))
		} else {
			m.check(cNoStore, "")
		}
		if sid := res.Header.Get("Mcp-Session-Id"); sid != "" {
			m.check(cStateless, "a "+what+" answer issues Mcp-Session-Id")
		} else {
			m.check(cStateless, "")
		}
		if res.Status == http.StatusMethodNotAllowed || res.Status == http.StatusRequestEntityTooLarge || res.Status == http.StatusUnauthorized {
			continue // HTTP-level refusals: their bodies are the implementation's
		}
		ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
		var a rpcAnswer
		if ct != "application/json" || json.Unmarshal(res.Body, &a) != nil || a.JSONRPC != "2.0" {
			m.check(cJSON, fmt.Sprintf("a %s answer is %q %.60q", what, res.Header.Get("Content-Type"), res.Body))
		} else {
			m.check(cJSON, "")
		}
	}
}
