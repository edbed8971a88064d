package fakecore

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// agentPath matches the Agent API paths the fake implements. A workspace
// segment outside Core's pattern does not match (→ 404 not_found, like Core).
var agentPath = regexp.MustCompile(`^/agent-api/v1/workspaces/([a-z0-9][a-z0-9_-]{1,63})/(system-info|turns|knowledge/capabilities|knowledge/search|knowledge/read)$`)

// serveAgentAPI is handleAgentApiHttpFor: authenticate first, then match.
func (c *Core) serveAgentAPI(w http.ResponseWriter, r *http.Request, body []byte, tooLarge bool) {
	w.Header().Set("Cache-Control", "no-store")
	s, ok := c.authenticate(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, errBody{Error: "unauthorized"})
		return
	}
	m := agentPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		writeJSON(w, http.StatusNotFound, errBody{Error: "not_found"})
		return
	}
	name, op := m[1], m[2]
	switch {
	case op == "system-info" && r.Method == http.MethodGet && c.opts.SystemInfo:
		if c.writeGate(w, name, s) {
			return
		}
		writeJSON(w, http.StatusOK, struct {
			SchemaVersion string `json:"schema_version"`
			Route         string `json:"route"`
			CoreVersion   string `json:"core_version"`
		}{"bailing.agent-system-info.v1", name, "0.7.0"})
	case op == "knowledge/capabilities" && r.Method == http.MethodGet && c.native.Load():
		if c.writeGate(w, name, s) {
			return
		}
		writeJSON(w, http.StatusOK, nativeCapabilities(name))
	case op == "knowledge/search" && r.Method == http.MethodPost && c.native.Load():
		if c.writeGate(w, name, s) {
			return
		}
		writeJSON(w, http.StatusOK, nativeSearch{
			SchemaVersion: protocol.SearchSchema, Route: name,
			KnowledgeScopeRevision: scopeRevision(name), Trust: protocol.Trust,
			Status: protocol.StatusOK, Hints: []any{},
		})
	case op == "knowledge/read" && r.Method == http.MethodPost && c.native.Load():
		if c.writeGate(w, name, s) {
			return
		}
		writeJSON(w, http.StatusBadRequest, errBody{Error: "knowledge_reference_invalid", Message: "The knowledge reference is invalid."})
	case op == "turns" && r.Method == http.MethodPost:
		c.serveTurn(w, r, name, s, body, tooLarge)
	default:
		writeJSON(w, http.StatusNotFound, errBody{Error: "not_found"})
	}
}

// writeGate answers the route gate's error, if any, and reports whether it did.
func (c *Core) writeGate(w http.ResponseWriter, name string, s corefacts.Session) bool {
	c.mu.Lock()
	r := c.routes[name]
	gate := GateRouteUnavailable
	if r != nil {
		gate = r.gate
	}
	c.mu.Unlock()
	if gate == GateAllowed && !slices.Contains(s.AllowedRoutes, name) && !slices.Contains(s.AllowedRoutes, "*") {
		gate = GateRouteNotAllowed
	}
	if gate == GateAllowed {
		return false
	}
	g := gates[gate]
	writeJSON(w, g.status, errBody{Error: gate, Message: g.message})
	return true
}

func scopeRevision(route string) string {
	sum := sha256.Sum256([]byte("fakecore scope " + route))
	return hex.EncodeToString(sum[:])
}

type nativeLimits struct {
	SearchMaxResults    int `json:"search_max_results"`
	SearchMaxBytes      int `json:"search_max_bytes"`
	ReadDefaultBytes    int `json:"read_default_bytes"`
	ReadMaxBytes        int `json:"read_max_bytes"`
	ReferenceTTLSeconds int `json:"reference_ttl_seconds"`
	ReadChainMaxBytes   int `json:"read_chain_max_bytes"`
}

type capabilitiesJSON struct {
	SchemaVersion          string       `json:"schema_version"`
	Protocol               string       `json:"protocol"`
	Supported              bool         `json:"supported"`
	Route                  string       `json:"route"`
	Enabled                bool         `json:"enabled"`
	KnowledgeScopeRevision string       `json:"knowledge_scope_revision"`
	DeliveryModes          []string     `json:"delivery_modes"`
	Limits                 nativeLimits `json:"limits"`
}

func nativeCapabilities(route string) capabilitiesJSON {
	return capabilitiesJSON{
		SchemaVersion: protocol.CapabilitiesSchema, Protocol: protocol.Name,
		Supported: true, Route: route, Enabled: true, KnowledgeScopeRevision: scopeRevision(route),
		DeliveryModes: []string{string(protocol.DeliveryInline), string(protocol.DeliveryOnDemand)},
		Limits: nativeLimits{protocol.SearchMaxResults, protocol.SearchMaxBytes, protocol.ReadDefaultBytes,
			protocol.ReadMaxBytes, protocol.ReferenceTTLSeconds, protocol.ReadChainMaxBytes},
	}
}

type nativeSearch struct {
	SchemaVersion          string `json:"schema_version"`
	Route                  string `json:"route"`
	KnowledgeScopeRevision string `json:"knowledge_scope_revision"`
	Trust                  string `json:"trust"`
	Status                 string `json:"status"`
	Hints                  []any  `json:"hints"`
	Truncated              bool   `json:"truncated"`
}

// Turn limits and messages (CORE_FACTS §3). The body limit is
// corefacts.TurnBodyMax, the one copy; this package's tests spell 524288
// themselves, so a wrong constant there fails them.
const (
	pageContextMax     = 16 << 10
	userInputMax       = 64000
	msgUndeclared      = "The Agent turn contains missing or undeclared fields."
	msgInvalidJSON     = "The request body must be valid JSON."
	msgNotObject       = "The request body must be a JSON object."
	turnConflictMsg    = "turn id or user message id is already bound to different input"
	turnContextSchema  = "bailing.agent-turn-context.v1"
	maxRenderers       = 20
	knowledgeTitleMax  = 300
	knowledgeContentMx = 3000
)

var (
	msgTooLarge = "The Agent tool request exceeds " + strconv.Itoa(corefacts.TurnBodyMax) + " bytes."
	stableID    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	rendererID  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
)

type turnRecord struct {
	hash     string
	response []byte
}

type memoryMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type turnResponse struct {
	SchemaVersion      string             `json:"schema_version"`
	RunID              string             `json:"run_id"`
	TaskBinding        json.RawMessage    `json:"task_binding,omitempty"`
	ProfileRevision    string             `json:"profile_revision"`
	CapabilityRevision string             `json:"capability_revision"`
	Context            turnContext        `json:"context"`
	ActiveTools        []any              `json:"active_tools"`
	KnowledgeDelivery  *knowledgeDelivery `json:"knowledge_delivery,omitempty"`
}

type turnContext struct {
	Instructions string          `json:"instructions"`
	PageContext  json.RawMessage `json:"page_context"`
	Renderers    []string        `json:"renderers"`
	Memory       struct {
		Summary *string         `json:"summary"`
		Recent  []memoryMessage `json:"recent"`
	} `json:"memory"`
	MemoryRefs    []memoryRef     `json:"memory_refs"`
	Knowledge     []knowledgeItem `json:"knowledge"`
	KnowledgeRefs []knowledgeRef  `json:"knowledge_refs"`
	Governance    governanceBlock `json:"governance"`
}

type memoryRef struct {
	ThreadID      int `json:"thread_id"`
	SummaryUptoID int `json:"summary_upto_id"`
	PriorMessages int `json:"prior_messages"`
}

type knowledgeItem struct {
	Ref     string `json:"ref"`
	Title   string `json:"title"`
	Content string `json:"content"`
}

type knowledgeRef struct {
	Ref   string  `json:"ref"`
	DocID int64   `json:"doc_id"`
	Title string  `json:"title"`
	Score float64 `json:"score"`
}

type governanceBlock struct {
	Planner             string `json:"planner"`
	Execution           string `json:"execution"`
	Authorization       string `json:"authorization"`
	KnowledgeTrust      string `json:"knowledge_trust"`
	ToolResultsTrust    string `json:"tool_results_trust"`
	HiddenReasoningSync bool   `json:"hidden_reasoning_sync"`
	MaxToolCalls        int    `json:"max_tool_calls"`
	Permission          string `json:"permission"`
}

type knowledgeDelivery struct {
	SchemaVersion          string `json:"schema_version"`
	Mode                   string `json:"mode"`
	Protocol               string `json:"protocol"`
	KnowledgeScopeRevision string `json:"knowledge_scope_revision"`
	Status                 string `json:"status"`
	Hints                  []any  `json:"hints"`
}

func invalidRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, errBody{Error: "invalid_request", Message: msg})
}

// turnRequest is a turn's body as Core validated it.
type turnRequest struct {
	fields      map[string]json.RawMessage
	ids         map[string]string // client_conversation_id, client_turn_id, user_message_id (trimmed)
	input       string
	pageContext json.RawMessage // canonical; {} when absent
	renderers   []string
	mode        string // knowledge_delivery; "" when absent
	taskBinding json.RawMessage
}

// turnRefusal is an error answer of the turn endpoint.
type turnRefusal struct {
	status int
	body   errBody
}

func invalidTurn(msg string) *turnRefusal {
	return &turnRefusal{http.StatusBadRequest, errBody{Error: "invalid_request", Message: msg}}
}

// serveTurn is POST /agent-api/v1/workspaces/:route/turns (CORE_FACTS §3).
func (c *Core) serveTurn(w http.ResponseWriter, r *http.Request, name string, s corefacts.Session, body []byte, tooLarge bool) {
	if tooLarge || len(body) > corefacts.TurnBodyMax {
		writeJSON(w, http.StatusRequestEntityTooLarge, errBody{Error: "arguments_too_large", Message: msgTooLarge})
		return
	}
	if !json.Valid(body) {
		invalidRequest(w, msgInvalidJSON)
		return
	}
	var fields map[string]json.RawMessage
	if t := jsonTrim(body); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &fields) != nil {
		invalidRequest(w, msgNotObject)
		return
	}
	if c.writeGate(w, name, s) {
		return
	}
	req, refused := c.parseTurn(fields)
	if refused != nil {
		writeJSON(w, refused.status, refused.body)
		return
	}
	resp, ok := c.startTurn(name, s, req)
	if !ok {
		writeJSON(w, http.StatusConflict, errBody{Error: "turn_conflict", Message: turnConflictMsg})
		return
	}
	c.writeTurn(w, r, resp)
}

// parseTurn checks a turn body's fields after the gate: declared fields,
// ids, user_input, then the optional page_context, renderers,
// knowledge_delivery and task_binding.
func (c *Core) parseTurn(fields map[string]json.RawMessage) (turnRequest, *turnRefusal) {
	req := turnRequest{fields: fields, ids: map[string]string{}}
	if refused := c.checkDeclared(fields); refused != nil {
		return req, refused
	}
	for _, k := range []string{"client_conversation_id", "client_turn_id", "user_message_id"} {
		var v string
		if json.Unmarshal(fields[k], &v) != nil || !stableID.MatchString(JSTrim(v)) {
			return req, invalidTurn(k + " must be a 1..128 character stable identifier.")
		}
		req.ids[k] = JSTrim(v)
	}
	if json.Unmarshal(fields["user_input"], &req.input) != nil {
		return req, invalidTurn("user_input must be a string.")
	}
	switch {
	case len(utf16.Encode([]rune(req.input))) > userInputMax:
		return req, invalidTurn("user_input must not exceed 64000 characters.")
	case strings.ContainsFunc(req.input, func(r rune) bool { return (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f }):
		return req, invalidTurn("user_input contains disallowed control characters.")
	case JSTrim(req.input) == "":
		return req, invalidTurn("user_input must not be empty.")
	}
	return req, parseTurnOptions(fields, &req)
}

// checkDeclared refuses a turn body with a field Core does not declare (for
// the Core version the options stand for) or without a required one.
func (c *Core) checkDeclared(fields map[string]json.RawMessage) *turnRefusal {
	declared := map[string]bool{
		"client_conversation_id": true, "client_turn_id": true, "user_message_id": true, "user_input": true,
		"page_context": false, "renderers": false,
	}
	if c.opts.TaskControl {
		declared["task_binding"] = false
	}
	if c.native.Load() {
		declared["knowledge_delivery"] = false
	}
	for k := range fields {
		if _, ok := declared[k]; !ok {
			return invalidTurn(msgUndeclared)
		}
	}
	for k, required := range declared {
		if _, ok := fields[k]; required && !ok {
			return invalidTurn(msgUndeclared)
		}
	}
	return nil
}

// parseTurnOptions reads the optional page_context, renderers,
// knowledge_delivery and task_binding into req.
func parseTurnOptions(fields map[string]json.RawMessage, req *turnRequest) *turnRefusal {
	req.pageContext = json.RawMessage(`{}`)
	if raw, ok := fields["page_context"]; ok {
		var obj map[string]any
		if t := jsonTrim(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &obj) != nil {
			return invalidTurn("page_context must be an object.")
		}
		canon, _ := json.Marshal(obj)
		if len(canon) > pageContextMax {
			return &turnRefusal{http.StatusRequestEntityTooLarge, errBody{Error: "page_context_too_large", Message: "page_context exceeds 16 KiB."}}
		}
		req.pageContext = canon
	}
	req.renderers = []string{}
	if raw, ok := fields["renderers"]; ok {
		if json.Unmarshal(raw, &req.renderers) != nil || req.renderers == nil || len(req.renderers) > maxRenderers || !validRenderers(req.renderers) {
			return invalidTurn("renderers must be an array of at most 20 unique renderer identifiers.")
		}
	}
	if raw, ok := fields["knowledge_delivery"]; ok {
		if json.Unmarshal(raw, &req.mode) != nil || (req.mode != "inline" && req.mode != "on_demand") {
			return invalidTurn("knowledge_delivery must be inline or on_demand.")
		}
	}
	if raw, ok := fields["task_binding"]; ok {
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			return &turnRefusal{http.StatusBadRequest, errBody{Error: "TASK_INVALID_INPUT", Message: "The governed task operation could not be accepted."}}
		}
		req.taskBinding, _ = json.Marshal(obj)
	}
	return nil
}

// startTurn answers a valid turn: the frozen answer of a replay with the
// same request hash, false for a conflicting replay, else a new run's
// answer, frozen and recorded under both idempotency keys.
func (c *Core) startTurn(name string, s corefacts.Session, req turnRequest) ([]byte, bool) {
	hash := requestHash(name, req.ids, req.input, req.fields, req.pageContext, req.renderers, req.mode, req.taskBinding)
	k1 := "t\x00" + strings.Join([]string{s.SessionID, name, req.ids["client_conversation_id"], req.ids["client_turn_id"]}, "\x00")
	k2 := "m\x00" + strings.Join([]string{s.SessionID, name, req.ids["user_message_id"]}, "\x00")
	conv := strings.Join([]string{s.SessionID, name, req.ids["client_conversation_id"]}, "\x00")

	c.mu.Lock()
	if r1, r2 := c.turns[k1], c.turns[k2]; r1 != nil || r2 != nil {
		c.mu.Unlock()
		if r1 == r2 && r1.hash == hash {
			return r1.response, true
		}
		return nil, false
	}
	thread, prior := c.thread(conv)
	runID := newUUID()
	frozen := encodeJSON(c.turnResponseLocked(name, runID, req, thread.id, prior))
	rec := &turnRecord{hash: hash, response: frozen}
	c.turns[k1], c.turns[k2] = rec, rec
	thread.messages = append(thread.messages, memoryMessage{Role: "user", Content: req.input})
	run := corefacts.Run{RunID: runID, SessionID: s.SessionID, ClientAppID: s.ClientAppID, RouteKey: name, Status: "context_ready"}
	c.runs = append(c.runs, run)
	onRun := c.opts.OnRun
	c.mu.Unlock()

	if onRun != nil {
		onRun(run)
	}
	return frozen, true
}

// turnResponseLocked builds a new run's turn context (c.mu held): the
// thread's prior messages, the route's inline knowledge unless the delivery
// is on_demand, and the delivery block when one was asked.
func (c *Core) turnResponseLocked(name, runID string, req turnRequest, threadID int, prior []memoryMessage) turnResponse {
	resp := turnResponse{
		SchemaVersion:      turnContextSchema,
		RunID:              runID,
		TaskBinding:        req.taskBinding,
		ProfileRevision:    revision("profile", name),
		CapabilityRevision: revision("capabilities", name),
		ActiveTools:        []any{},
	}
	ctx := &resp.Context
	ctx.Instructions = "You are the " + name + " assistant of the fake Core."
	ctx.PageContext = req.pageContext
	ctx.Renderers = req.renderers
	ctx.Memory.Recent = prior
	ctx.MemoryRefs = []memoryRef{{ThreadID: threadID, PriorMessages: len(prior)}}
	ctx.Knowledge, ctx.KnowledgeRefs = []knowledgeItem{}, []knowledgeRef{}
	if req.mode != "on_demand" {
		c.inlineKnowledgeLocked(ctx, name, req)
	}
	ctx.Governance = governanceBlock{
		Planner: "local_agent", Execution: "bailinghub_governed", Authorization: "server_revalidated",
		KnowledgeTrust: "reference_only", ToolResultsTrust: "untrusted_data", MaxToolCalls: 5, Permission: "full",
	}
	if req.mode != "" {
		resp.KnowledgeDelivery = &knowledgeDelivery{
			SchemaVersion: protocol.DeliverySchema, Mode: req.mode, Protocol: protocol.Name,
			KnowledgeScopeRevision: scopeRevision(name), Status: "ok", Hints: []any{},
		}
	}
	return resp
}

// inlineKnowledgeLocked fills ctx's knowledge as Core's turn does (c.mu
// held): the route's retrieval for the turn's query, or its fixed items,
// less those of a knowledge base whose embeddings are down.
func (c *Core) inlineKnowledgeLocked(ctx *turnContext, name string, req turnRequest) {
	rt := c.routes[name]
	var items []TurnKnowledge
	switch {
	case rt != nil && rt.retrieval != nil:
		items = c.retrieveLocked(*rt.retrieval, turnQuery(req.pageContext, req.input))
	case rt != nil:
		items = rt.knowledge
	}
	n := 0
	for _, k := range items {
		if c.embeddingsDownForLocked(k.DocID) {
			continue // Core's searchMulti skipped the failing KB
		}
		n++
		ref := "knowledge:" + strconv.Itoa(n)
		ctx.Knowledge = append(ctx.Knowledge, knowledgeItem{Ref: ref, Title: cutUTF16(k.Title, knowledgeTitleMax), Content: cutUTF16(k.Content, knowledgeContentMx)})
		ctx.KnowledgeRefs = append(ctx.KnowledgeRefs, knowledgeRef{Ref: ref, DocID: k.DocID, Title: cutUTF16(k.Title, knowledgeTitleMax), Score: k.Score})
	}
}

// turnQuery is Core's queryWithPage: the page context's title, page_name,
// page_key and url (each at most 500 characters) joined with spaces, then
// "\n" and the user input, cut to 2,000 characters.
func turnQuery(pageContext json.RawMessage, input string) string {
	var page map[string]any
	_ = json.Unmarshal(pageContext, &page)
	var parts []string
	for _, k := range []string{"title", "page_name", "page_key", "url"} {
		if v, ok := page[k].(string); ok && JSTrim(v) != "" {
			parts = append(parts, cutUTF16(JSTrim(v), 500))
		}
	}
	return cutUTF16(strings.Join(parts, " ")+"\n"+input, 2000)
}

// retrieveLocked is a turn's searchMulti: every KB of r ranked like
// /kb/search, failing and unknown KBs skipped. Caller holds mu.
func (c *Core) retrieveLocked(r TurnRetrieval, query string) []TurnKnowledge {
	topK := min(max(r.TopK, 1), 20)
	var hits []kbHit
	for _, id := range r.KBIDs {
		stored, k := c.findKBLocked(id)
		if k == nil || c.embedOutage || k.embedDown {
			continue
		}
		hits = append(hits, k.search(id, k.indexFor(id, stored), query, topK, r.MinScore)...)
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	if len(hits) > topK {
		hits = hits[:topK]
	}
	out := make([]TurnKnowledge, 0, len(hits))
	for _, h := range hits {
		out = append(out, TurnKnowledge{DocID: h.DocID, Title: h.Title, Content: h.Content, Score: h.Score})
	}
	return out
}

func validRenderers(rs []string) bool {
	seen := map[string]bool{}
	for _, r := range rs {
		if !rendererID.MatchString(r) || seen[r] {
			return false
		}
		seen[r] = true
	}
	return true
}

// requestHash is Core's sha256 over a stable JSON of the turn's input.
func requestHash(route string, ids map[string]string, input string, fields map[string]json.RawMessage, pageContext json.RawMessage, renderers []string, mode string, taskBinding json.RawMessage) string {
	v := map[string]any{"schema": turnContextSchema, "route": route, "user_input": input}
	for k, id := range ids {
		v[k] = id
	}
	if _, ok := fields["page_context"]; ok {
		v["page_context"] = pageContext
	}
	if _, ok := fields["renderers"]; ok {
		v["renderers"] = renderers
	}
	if mode != "" {
		v["knowledge_delivery"] = mode
	}
	if taskBinding != nil {
		v["task_binding"] = taskBinding
	}
	b, _ := json.Marshal(v) // map keys sorted: stable
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type thread struct {
	id       int
	messages []memoryMessage
}

// thread returns the conversation's thread and a copy of its prior messages. Caller holds mu.
func (c *Core) thread(key string) (*thread, []memoryMessage) {
	if c.threads == nil {
		c.threads = map[string]*thread{}
	}
	t := c.threads[key]
	if t == nil {
		t = &thread{id: len(c.threads) + 1}
		c.threads[key] = t
	}
	return t, append([]memoryMessage{}, t.messages...)
}

// writeTurn sends a frozen turn answer, gzip-compressed when enabled and accepted.
func (c *Core) writeTurn(w http.ResponseWriter, r *http.Request, body []byte) {
	if c.opts.GzipTurns && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		writeRaw(w, http.StatusOK, buf.Bytes())
		return
	}
	writeRaw(w, http.StatusOK, body)
}

// acceptsGzip reads Accept-Encoding as Core does, trimming as JavaScript trims.
func acceptsGzip(v string) bool {
	for _, part := range strings.Split(v, ",") {
		coding, params, _ := strings.Cut(JSTrim(part), ";")
		if strings.EqualFold(JSTrim(coding), "gzip") {
			q := strings.ReplaceAll(JSTrim(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

func revision(kind, route string) string {
	sum := sha256.Sum256([]byte("fakecore " + kind + " " + route))
	return hex.EncodeToString(sum[:])
}

// cutUTF16 cuts s to at most n UTF-16 code units (JavaScript string length),
// never splitting a surrogate pair.
func cutUTF16(s string, n int) string {
	units := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}
