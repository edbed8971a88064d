package test

// The lifecycle of a Core upgraded to serve the knowledge protocol natively
// while sessions are live, and rolled back (SPEC §8.2, docs/rollout.md
// "Upgrading Core to a native version"): a sidecar built as `serve` builds
// it (sidecar.Build) in front of the fake Core on the real MariaDB catalog;
// mid-session the Core double is replaced by a native one on the same
// database and the same address (a switchable handler), and back.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// switchedCore is one Core address whose handler a test swaps: the Core
// "restarted" as another version on the same database.
type switchedCore struct{ cur atomic.Pointer[fakecore.Core] }

func (s *switchedCore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.cur.Load().ServeHTTP(w, r)
}

// nativeTwin is a native fake Core of w's database: the same knowledge
// index, routes, runs table and sessions (the same bearer tokens) as w.Core.
func nativeTwin(t *testing.T, w *World) *fakecore.Core {
	t.Helper()
	c := fakecore.New(fakecore.Options{Native: true, ServiceToken: w.ServiceToken, OnRun: func(r corefacts.Run) {
		_, err := w.DB.Admin.Exec(`INSERT INTO bz_agent_client_runs
			(run_id, session_id, client_app_id, route_key, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'context_ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`,
			r.RunID, r.SessionID, r.ClientAppID, r.RouteKey)
		if err != nil {
			t.Errorf("native twin: insert run: %v", err)
		}
	}})
	t.Cleanup(c.Close)
	if err := w.DB.IndexIn(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{testdb.RouteMulti, testdb.RouteLegacy} {
		c.SetRoute(route, fakecore.GateAllowed)
	}
	c.AddSession(w.TokenA, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"manager"}, Audience: "internal"},
		OnBehalfOf:    "tenant-7:user-42",
		AllowedRoutes: []string{testdb.RouteMulti, testdb.RouteLegacy},
		ExpiresAt:     time.Now().Add(15 * time.Minute),
	})
	return c
}

// upgradeAnswer is what the test reads of a search or read answer.
type upgradeAnswer struct {
	Status int    `json:"-"` // HTTP status
	Raw    string `json:"-"`
	Error  string `json:"error"`
	Msg    string `json:"message"`
	Schema string `json:"schema_version"`
	Scope  string `json:"knowledge_scope_revision"`
	Hints  []struct {
		Title, Ref string
	} `json:"hints"`
	Content    string  `json:"content"`
	NextCursor *string `json:"next_cursor"`
	Total      int     `json:"total_content_bytes"`
}

// TestUpgradeCoreMidSession: a read chain started before the Core turns
// native continues through the sidecar (ref and cursor, the same pages)
// until its ref expires, while new searches and foreign reads go to the
// native Core; the verdict changes only once probe_interval has passed; the
// same backwards, where a native Core's ref is refused with "search again"
// and the sidecar's refs keep working.
func TestUpgradeCoreMidSession(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	legacy, native := w.Core, nativeTwin(t, w)
	sw := &switchedCore{}
	sw.cur.Store(legacy)
	front := newCoreTap(t, sw) // what reaches Core, byte for byte

	const probeInterval = time.Minute
	clock := testkit.NewRunningClock()
	cfg := w.Config()
	cfg.Core.URL = front.URL
	cfg.Ledger.Backend = "memory"
	cfg.ProbeInterval = probeInterval
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg.Audit.Enabled, cfg.Audit.File = true, auditFile
	cfg.MCP.AuthorizationServers = []string{"https://auth.example"}
	_, url := serveBuilt(t, cfg, sidecar.Deps{Now: clock.Now, SingleProcess: true})
	ws := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti
	c := newClient(t)

	call := func(op string, body map[string]any) upgradeAnswer {
		t.Helper()
		b, _ := json.Marshal(body)
		r := send(t, c, "POST", ws+"/knowledge/"+op, w.TokenA, b, nil)
		a := upgradeAnswer{Status: r.Status, Raw: string(r.Body)}
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatalf("%s: %d %s: %v", op, r.Status, r.Body, err)
		}
		return a
	}
	readPath := "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/read"
	searchPath := "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/search"
	// sidecarSearch: a search the sidecar answered (its refs), never Core.
	sidecarSearch := func(step string) upgradeAnswer {
		t.Helper()
		n := legacy.Calls(searchPath) + native.Calls(searchPath)
		a := call("search", map[string]any{"query": testdb.BigDocUnit})
		if a.Status != 200 || len(a.Hints) == 0 || !strings.HasPrefix(a.Hints[0].Ref, "kr2.") {
			t.Fatalf("%s: search got %d %s; want the sidecar's hints", step, a.Status, a.Raw)
		}
		if got := legacy.Calls(searchPath) + native.Calls(searchPath) - n; got != 0 {
			t.Errorf("%s: the search reached Core %d times; want the sidecar's answer", step, got)
		}
		return a
	}
	nativeSearch := func(step string) {
		t.Helper()
		n := native.Calls(searchPath)
		a := call("search", map[string]any{"query": testdb.BigDocUnit})
		if a.Status != 200 || len(a.Hints) != 0 || native.Calls(searchPath) != n+1 {
			t.Errorf("%s: search got %d %s (native Core calls +%d); want the native Core's answer",
				step, a.Status, a.Raw, native.Calls(searchPath)-n)
		}
	}
	// sidecarRead: a read the sidecar answered; Core saw no read.
	sidecarRead := func(step string, body map[string]any) upgradeAnswer {
		t.Helper()
		n := legacy.Calls(readPath) + native.Calls(readPath)
		a := call("read", body)
		if a.Status != 200 || a.Schema != "bailing.agent-knowledge-read.v1" {
			t.Fatalf("%s: read got %d %s; want the sidecar's page", step, a.Status, a.Raw)
		}
		if got := legacy.Calls(readPath) + native.Calls(readPath) - n; got != 0 {
			t.Errorf("%s: the read reached Core %d times; want the sidecar's answer", step, got)
		}
		return a
	}

	// One MCP session of a host through the sidecar's remote endpoint,
	// across the flip (SPEC §8.2): its tools' answers read as the
	// protocol's JSON (structuredContent).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	session := connectRemote(t, ctx, ws+"/knowledge/mcp", w.TokenA)
	tool := func(step, name string, args map[string]any) (upgradeAnswer, *mcp.CallToolResult) {
		t.Helper()
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %s: %v", step, name, err)
		}
		var a upgradeAnswer
		if !res.IsError {
			raw, _ := json.Marshal(res.StructuredContent)
			a.Raw = string(raw)
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatalf("%s: %s: %s: %v", step, name, raw, err)
			}
		}
		return a, res
	}
	text := func(res *mcp.CallToolResult) string {
		if len(res.Content) == 0 {
			return ""
		}
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			return tc.Text
		}
		return ""
	}
	coreCalls := func() int {
		return legacy.Calls(searchPath) + native.Calls(searchPath) + legacy.Calls(readPath) + native.Calls(readPath)
	}

	// Before the upgrade: the sidecar serves the protocol; a read chain starts.
	before := sidecarSearch("legacy Core")
	ref := hintRef(t, []byte(before.Raw), testdb.DocBigTitle)
	page1 := sidecarRead("legacy Core, page 1", map[string]any{"ref": ref, "max_bytes": 4096})
	if page1.NextCursor == nil {
		t.Fatalf("page 1 has no next_cursor: %s", page1.Raw)
	}
	cursor := *page1.NextCursor
	page2 := sidecarRead("legacy Core, page 2", map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 4096})
	// The MCP session searches and reads through the sidecar as well.
	n := coreCalls()
	mcpFound, res := tool("legacy Core", protocol.SearchTool, map[string]any{"query": testdb.BigDocUnit})
	if res.IsError || len(mcpFound.Hints) == 0 || !strings.HasPrefix(mcpFound.Hints[0].Ref, "kr2.") {
		t.Fatalf("MCP search, legacy Core: %q %s; want the sidecar's hints", text(res), mcpFound.Raw)
	}
	mcpPage, res := tool("legacy Core", protocol.ReadTool, map[string]any{"ref": ref})
	if res.IsError || mcpPage.Content == "" {
		t.Fatalf("MCP read, legacy Core: %q; want the sidecar's page", text(res))
	}
	if got := coreCalls() - n; got != 0 {
		t.Errorf("MCP session, legacy Core: Core's knowledge endpoints asked %d times; want the sidecar's answers", got)
	}

	// Core restarts as a native version on the same database and address.
	sw.cur.Store(native)
	sidecarSearch("native Core, verdict still held") // probe_interval bounds how soon a flip is seen
	clock.Advance(probeInterval)
	nativeSearch("native Core, after probe_interval")

	// The MCP endpoint keeps answering the same session: a new search is
	// the native Core's answer, a read of the pre-flip ref continues from
	// the sidecar, a foreign ref is the native Core's to judge. The audit
	// records what the sidecar disclosed: the read of its own ref only.
	audited := len(readAudit(t, auditFile))
	n = native.Calls(searchPath)
	if a, res := tool("native Core", protocol.SearchTool, map[string]any{"query": testdb.BigDocUnit}); res.IsError ||
		len(a.Hints) != 0 || native.Calls(searchPath) != n+1 {
		t.Errorf("MCP search after the flip: %q %s (native Core searches +%d); want the native Core's answer",
			text(res), a.Raw, native.Calls(searchPath)-n)
	}
	n = coreCalls()
	if a, res := tool("native Core", protocol.ReadTool, map[string]any{"ref": ref}); res.IsError || a.Content != mcpPage.Content {
		t.Errorf("MCP read of the pre-flip ref after the flip: %.200q; want the sidecar's page as before", text(res))
	}
	if got := coreCalls() - n; got != 0 {
		t.Errorf("MCP read of the pre-flip ref after the flip reached Core %d times; want the sidecar's answer", got)
	}
	n = native.Calls(readPath)
	_, res = tool("native Core", protocol.ReadTool, map[string]any{"ref": "knowledge:1"})
	if !res.IsError || native.Calls(readPath) != n+1 || !strings.HasPrefix(text(res), string(protocol.CodeReferenceInvalid)) {
		t.Errorf("MCP read of a foreign ref after the flip: %.200q (native Core reads +%d); want the native Core's refusal",
			text(res), native.Calls(readPath)-n)
	}
	if evs := readAudit(t, auditFile)[audited:]; len(evs) != 1 || evs[0].Endpoint != "mcp:"+protocol.ReadTool ||
		evs[0].Status == "refused" || len(evs[0].Documents) == 0 {
		t.Errorf("MCP tool calls after the flip audited %+v; want one event, the sidecar's read of its own ref", evs)
	}
	// The endpoint's RFC 9728 document, its 401 challenge and its 405 are
	// still the sidecar's.
	if get := send(t, c, "GET", ws+"/knowledge/mcp", w.TokenA, nil, nil); get.Status != 405 || get.Header.Get("Allow") != "POST" {
		t.Errorf("GET of the MCP endpoint after the flip: %d (Allow %q); want the sidecar's 405", get.Status, get.Header.Get("Allow"))
	}
	meta := send(t, c, "GET", url+"/.well-known/oauth-protected-resource/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/mcp", "", nil, nil)
	if meta.Status != 200 || !strings.Contains(string(meta.Body), "https://auth.example") {
		t.Errorf("MCP metadata after the flip: %d %s; want the sidecar's document", meta.Status, meta.Body)
	}
	anon := send(t, c, "POST", ws+"/knowledge/mcp", "", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	if anon.Status != 401 || !strings.Contains(anon.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("MCP request without a bearer after the flip: %d %q; want the sidecar's 401 challenge",
			anon.Status, anon.Header.Get("WWW-Authenticate"))
	}

	// The chain started before the flip continues through the sidecar.
	again := sidecarRead("native Core, old ref", map[string]any{"ref": ref, "max_bytes": 4096})
	if again.Content != page1.Content || again.Total != page1.Total || again.NextCursor == nil {
		t.Errorf("old ref after the flip: a page other than before (%d bytes of %d)", len(again.Content), again.Total)
	}
	cont := sidecarRead("native Core, old cursor", map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 4096})
	if cont.Content != page2.Content || cont.Total != page2.Total {
		t.Errorf("old cursor after the flip: a page other than before")
	}
	// Any other read goes to the native Core, byte for byte: a foreign ref,
	// and a body over the knowledge endpoints' 16 KiB limit (a sidecar ref
	// in it or not: Core judges it, whole).
	for _, tc := range []struct{ name, body string }{
		{"foreign ref", `{ "ref" : "knowledge:1" }`},
		{"over 16 KiB", `{"ref":"` + ref + `","pad":"` + strings.Repeat("x", 20<<10) + `"}`},
	} {
		n, seen := native.Calls(readPath), front.count()
		r := send(t, c, "POST", ws+"/knowledge/read", w.TokenA, []byte(tc.body), nil)
		var got []byte
		for _, e := range front.since(seen) {
			if e.Path == readPath {
				got = e.ReqBody
			}
		}
		if native.Calls(readPath) != n+1 || r.Status != 400 || !strings.Contains(string(r.Body), "knowledge_reference_invalid") {
			t.Errorf("%s after the flip: got %d %s (native Core reads +%d); want the native Core's answer",
				tc.name, r.Status, r.Body, native.Calls(readPath)-n)
		}
		if string(got) != tc.body {
			t.Errorf("%s after the flip: Core received %d bytes; want the client's %d bytes as sent", tc.name, len(got), len(tc.body))
		}
	}

	// Turns across the flip: TestUpgradeTurnsMidSession (one Core flipped in
	// place keeps the turns it recorded, as Core's database does).

	// Rolled back: the sidecar serves every read again.
	sw.cur.Store(legacy)
	clock.Advance(probeInterval)
	sidecarSearch("rolled back, after probe_interval")
	nativeRef := call("read", map[string]any{"ref": "nk1.a-reference-the-native-core-issued"})
	if nativeRef.Status != 400 || nativeRef.Error != "knowledge_reference_invalid" || !strings.Contains(nativeRef.Msg, "search again") {
		t.Errorf("native Core's ref after a rollback: got %d %s; want 400 knowledge_reference_invalid telling to search again",
			nativeRef.Status, nativeRef.Raw)
	}
	back := sidecarRead("rolled back, old cursor", map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 4096})
	if back.Content != page2.Content {
		t.Errorf("the sidecar's cursor after a rollback: a page other than before")
	}

	// Native again, once the ref has expired: the read is the native Core's.
	sw.cur.Store(native)
	clock.Advance(5*time.Minute + time.Second)
	nativeSearch("native again")
	n = native.Calls(readPath)
	expired := call("read", map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 4096})
	if native.Calls(readPath) != n+1 {
		t.Errorf("expired sidecar ref after the flip: got %d %s; want it passed to the native Core", expired.Status, expired.Raw)
	}
}

// TestUpgradeTurnsMidSession is the turn side of the lifecycle
// (docs/rollout.md "Turns across a flip"): one Core, restarted as a native
// version and back on the same database (fakecore SetNative keeps the turns
// it recorded, as Core keeps them in its database), one sidecar built as
// `serve` builds it, the verdict changing once probe_interval has passed.
// A turn the sidecar served on_demand before the upgrade, retried after it,
// gets its first answer (never Core's 409, never inline knowledge); a new
// turn goes to the native Core untouched; after the rollback, a retry of a
// turn the native Core recorded passes untouched, and a new turn is
// intercepted again.
func TestUpgradeTurnsMidSession(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap := newCoreTap(t, w.Core)
	const probeInterval = time.Minute
	clock := testkit.NewRunningClock()
	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token = tap.URL, w.ServiceToken
	cfg.Catalog.DSN = w.DB.ReadOnlyDSN
	cfg.Rollout = "all"
	cfg.Ledger.Backend = "memory"
	cfg.ProbeInterval = probeInterval
	_, url := serveBuilt(t, cfg, sidecar.Deps{Now: clock.Now, SingleProcess: true})
	sc := &Sidecar{URL: url}
	route := testdb.RouteMulti
	c := newClient(t)
	turn := func(ti turnInput) (sent tapExchange, got turnResult) {
		t.Helper()
		n := tap.count()
		got = send(t, c, "POST", turnsURL(sc, route), w.TokenA, ti.body(`"on_demand"`), nil)
		return tap.oneSince(t, n), got
	}
	flip := func(native bool) {
		w.Core.SetNative(native)
		clock.Advance(probeInterval)
		// The next knowledge request past the interval probes Core again.
		scopeRevision(t, c, sc, route, w.TokenA)
	}

	before := newTurn("lifecycle-before")
	e, first := turn(before)
	if first.Status != 200 || !bytes.Equal(e.ReqBody, before.body("")) {
		t.Fatalf("legacy Core: got %d %s, Core got %s; want 200, the field stripped", first.Status, first.Body, e.ReqBody)
	}
	rev := scopeRevision(t, c, sc, route, w.TokenA)
	checkRewrite(t, e.RespBody, first.Body, "on_demand", "partial", rev)

	flip(true)
	e, retry := turn(before)
	if retry.Status != 200 || !bytes.Equal(e.ReqBody, before.body("")) {
		t.Fatalf("native Core, retry of a recorded turn: got %d %s, Core got %s; want 200 as recorded (stripped)",
			retry.Status, retry.Body, e.ReqBody)
	}
	checkRewrite(t, e.RespBody, retry.Body, "on_demand", "partial", rev)

	during := newTurn("lifecycle-native")
	e, fresh := turn(during)
	if fresh.Status != 200 || !bytes.Equal(e.ReqBody, during.body(`"on_demand"`)) {
		t.Fatalf("native Core, new turn: got %d %s, Core got %s; want the native Core's answer to the turn as sent",
			fresh.Status, fresh.Body, e.ReqBody)
	}
	checkRelayed(t, fresh, e)

	flip(false)
	e, again := turn(during)
	if !bytes.Equal(e.ReqBody, during.body(`"on_demand"`)) {
		t.Errorf("after the rollback, retry of a turn the native Core recorded: Core got %s; want it untouched", e.ReqBody)
	}
	checkRelayed(t, again, e)

	after := newTurn("lifecycle-after")
	e, last := turn(after)
	if last.Status != 200 || !bytes.Equal(e.ReqBody, after.body("")) {
		t.Errorf("after the rollback, new turn: got %d, Core got %s; want 200, the field stripped", last.Status, e.ReqBody)
	}
}
