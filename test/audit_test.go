package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// auditEvent is an audit line as docs/audit.md documents it, decoded
// strictly (an unknown field fails the test).
type auditEvent struct {
	Time        time.Time `json:"time"`
	RequestID   string    `json:"request_id"`
	TraceID     string    `json:"trace_id"`
	Endpoint    string    `json:"endpoint"`
	Route       string    `json:"route"`
	SessionID   string    `json:"session_id"`
	ClientAppID string    `json:"client_app_id"`
	PrincipalID string    `json:"principal_id"`
	OnBehalfOf  string    `json:"on_behalf_of"`
	ClientAddr  string    `json:"client_address"`
	RunID       string    `json:"run_id"`
	Status      string    `json:"status"`
	Error       string    `json:"error"`
	Documents   []struct {
		DocID           int64   `json:"doc_id"`
		KBID            string  `json:"kb_id"`
		Revision        string  `json:"revision"`
		Range           *[2]int `json:"range"`
		BudgetExhausted *bool   `json:"budget_exhausted"`
	} `json:"documents"`
	QueryLength *int   `json:"query_length"`
	QueryHMAC   string `json:"query_hmac"`
}

// readAudit decodes every line of the audit file at path.
func readAudit(t testing.TB, path string) []auditEvent {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("audit file: %v", err)
	}
	var evs []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var e auditEvent
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("audit line %s: %v", sc.Bytes(), err)
		}
		if e.Documents == nil {
			t.Errorf("audit line %s: documents must be an array, [] when none", sc.Bytes())
		}
		evs = append(evs, e)
	}
	return evs
}

// auditedWorld runs a sidecar of a new world, built as serve builds it,
// auditing to a file: the world, the file and the sidecar's URL.
func auditedWorld(t *testing.T) (w *World, file, url string) {
	t.Helper()
	w = NewWorld(t, WorldOptions{})
	file = filepath.Join(t.TempDir(), "audit.jsonl")
	_, url, _ = runBuilt(t, auditConfig(t, w, file), sidecar.Deps{})
	return w, file, url
}

// auditConfig is a built sidecar's configuration for w with the audit on,
// writing to file.
func auditConfig(t testing.TB, w *World, file string) config.Config {
	t.Helper()
	cfg := w.Config()
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = 1e6, 1e6
	cfg.Audit.Enabled, cfg.Audit.File = true, file
	return cfg
}

// runBuilt builds cfg as `serve` does and runs its edge on real listeners,
// the admin one with POST /-/reload wired to App.Reload (as serve wires it
// and SIGHUP): proxy URL, admin URL.
func runBuilt(t testing.TB, cfg config.Config, deps sidecar.Deps) (*sidecar.App, string, string) {
	t.Helper()
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatal(err)
	}
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	app, err := sidecar.Build(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	app.Server.SetReloader(func() error { return app.Reload(func() (config.Config, error) { return cfg, nil }) })
	ln, aln := listenLocal(t), listenLocal(t)
	def := config.Defaults()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Server.Run(ctx, proxy.ServeOptions{
			Listener: ln, AdminListener: aln, ReadHeaderTimeout: def.Proxy.ReadHeaderTimeout,
			IdleTimeout: def.Proxy.IdleTimeout, MaxHeaderBytes: def.Proxy.MaxHeaderBytes, ShutdownTimeout: 10 * time.Second,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := waitFor(t, done, "sidecar Run"); err != nil {
			t.Errorf("run: %v", err)
		}
		app.Close()
	})
	return app, "http://" + ln.Addr().String(), "http://" + aln.Addr().String()
}

// TestAuditScenario walks a whole host session — searches, a read chain to
// its budget's end, an on_demand turn with hints, refused answers (tampered
// and expired refs, a refused bearer) — and checks the audit: one event per
// answer, written before it (the file holds it when the answer arrives),
// with the request's id, the identity, the documents and the read ranges;
// and never a bearer, ref, cursor, query, title, summary or document text.
func TestAuditScenario(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	var mu sync.Mutex
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := auditConfig(t, w, file)
	key := strings.Repeat("k", 40)
	cfg.Audit.QueryHMACKey = key
	_, url, _ := runBuilt(t, cfg, sidecar.Deps{Now: clock})
	c := newClient(t)
	ws := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti

	secrets := []string{w.TokenA, w.TokenB}
	type answer struct {
		id, endpoint string
		status       int
		answered     string // the answer's own status (search, turn)
	}
	var answers []answer
	events := func() int { return len(readAudit(t, file)) }
	post := func(endpoint, u, token string, body []byte) turnResult {
		t.Helper()
		r := send(t, c, "POST", u, token, body, nil)
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			t.Fatalf("%s: no X-Request-Id", u)
		}
		answers = append(answers, answer{id: id, endpoint: endpoint, status: r.Status})
		if endpoint != "" && events() != len(answers) {
			t.Fatalf("%s answered before its audit event was written: %d events for %d answers", endpoint, events(), len(answers))
		}
		return r
	}
	search := func(q string) hostclient.SearchAnswer {
		t.Helper()
		secrets = append(secrets, q)
		body, _ := json.Marshal(map[string]any{"query": q})
		r := post("search", ws+"/knowledge/search", w.TokenA, body)
		var a hostclient.SearchAnswer
		if r.Status != 200 || json.Unmarshal(r.Body, &a) != nil || len(a.Hints) == 0 {
			t.Fatalf("search %q: got %d %s; want hints", q, r.Status, clip(string(r.Body)))
		}
		for _, h := range a.Hints {
			secrets = append(secrets, h.Ref, h.Title, h.Summary)
		}
		answers[len(answers)-1].answered = a.Status
		return a
	}

	refund := search(refundQuery)
	big := search(testdb.BigDocUnit)
	var bigRef string
	for _, h := range big.Hints {
		if h.Title == testdb.DocBigTitle {
			bigRef = h.Ref
		}
	}
	if bigRef == "" {
		t.Fatalf("no hint of %q", testdb.DocBigTitle)
	}
	// The read chain, to the end of its 128 KiB budget.
	type page struct {
		Content         string  `json:"content"`
		Title           string  `json:"title"`
		NextCursor      *string `json:"next_cursor"`
		BudgetExhausted bool    `json:"budget_exhausted"`
	}
	var pages []page
	cursor := ""
	for i := 0; ; i++ {
		req := map[string]any{"ref": bigRef, "max_bytes": 32768}
		if cursor != "" {
			req["cursor"] = cursor
		}
		body, _ := json.Marshal(req)
		r := post("read", ws+"/knowledge/read", w.TokenA, body)
		var p page
		if r.Status != 200 || json.Unmarshal(r.Body, &p) != nil {
			t.Fatalf("read %d: got %d %s", i, r.Status, clip(string(r.Body)))
		}
		pages = append(pages, p)
		secrets = append(secrets, p.Content, p.Title)
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
		secrets = append(secrets, cursor)
		if i > 20 {
			t.Fatal("read chain does not end")
		}
	}
	if !pages[len(pages)-1].BudgetExhausted {
		t.Fatalf("the big manual's chain ended without its budget: want a chain the budget ends")
	}

	// An on_demand turn with hints.
	ti := newTurn("audit")
	tr := post("turn", ws+"/turns", w.TokenA, ti.body(`"on_demand"`))
	if tr.Status != 200 {
		t.Fatalf("turn: got %d %s", tr.Status, tr.Body)
	}
	run := runIDOf(t, tr.Body)
	turnHints := decodeTurnHints(t, deliveryOf(t, tr.Body).Hints)
	answers[len(answers)-1].answered = deliveryOf(t, tr.Body).Status
	if len(turnHints) == 0 {
		t.Fatal("turn: no hints")
	}
	for _, h := range turnHints {
		secrets = append(secrets, h.Ref, h.Title, h.Summary)
	}
	secrets = append(secrets, ti.Input)

	// Refused: a tampered ref, a refused bearer, then an expired ref.
	tampered := []byte(refund.Hints[0].Ref)
	tampered[len(tampered)-10] ^= 1
	secrets = append(secrets, string(tampered))
	body, _ := json.Marshal(map[string]any{"ref": string(tampered)})
	if r := post("read", ws+"/knowledge/read", w.TokenA, body); r.Status != 400 {
		t.Fatalf("tampered ref: got %d; want 400", r.Status)
	}
	bad := randomToken(t, "bad_")
	secrets = append(secrets, bad)
	if r := post("search", ws+"/knowledge/search", bad, []byte(`{"query":"who am i"}`)); r.Status != 401 {
		t.Fatalf("refused bearer: got %d; want 401", r.Status)
	}
	mu.Lock()
	now = now.Add(301 * time.Second)
	mu.Unlock()
	body, _ = json.Marshal(map[string]any{"ref": refund.Hints[0].Ref})
	if r := post("read", ws+"/knowledge/read", w.TokenA, body); r.Status != 410 {
		t.Fatalf("expired ref: got %d; want 410", r.Status)
	}

	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if s != "" && bytes.Contains(raw, []byte(s)) {
			t.Errorf("the audit holds %.40q (a token, ref, cursor, query, title, summary or document text)", s)
		}
	}
	evs := readAudit(t, file)
	if len(evs) != len(answers) {
		t.Fatalf("audit events: got %d; want %d (one per answer)", len(evs), len(answers))
	}
	var next int // the read chain's next byte
	for i, e := range evs {
		a := answers[i]
		if e.RequestID != a.id || e.Endpoint != a.endpoint || e.Route != testdb.RouteMulti {
			t.Errorf("event %d: request %q endpoint %q route %q; want %q %q %q", i, e.RequestID, e.Endpoint, e.Route, a.id, a.endpoint, testdb.RouteMulti)
		}
		if time.Since(e.Time) > time.Minute && e.Time.Sub(now) > time.Minute {
			t.Errorf("event %d time %v: want the answer's", i, e.Time)
		}
		if a.status != 401 && (e.SessionID != testdb.SessionA || e.ClientAppID != testdb.AppA || e.PrincipalID != "user-42" || e.OnBehalfOf != "tenant-7:user-42") {
			t.Errorf("event %d identity: %q %q %q %q; want session A's", i, e.SessionID, e.ClientAppID, e.PrincipalID, e.OnBehalfOf)
		}
		switch {
		case a.status != 200:
			want := map[int]string{400: "knowledge_reference_invalid", 401: "unauthorized", 410: "knowledge_reference_expired"}[a.status]
			if e.Status != "refused" || e.Error != want || len(e.Documents) != 0 {
				t.Errorf("event %d of a %d: status %q error %q %d documents; want refused %q and none", i, a.status, e.Status, e.Error, len(e.Documents), want)
			}
		case a.endpoint == "search":
			if e.Status != a.answered || len(e.Documents) == 0 || e.Error != "" {
				t.Errorf("search event %d: %+v; want ok with its documents", i, e)
			}
			for _, d := range e.Documents {
				if d.DocID <= 0 || d.KBID == "" || len(d.Revision) != 64 || d.Range != nil {
					t.Errorf("search event %d document %+v: want doc_id, kb_id, revision only", i, d)
				}
			}
		case a.endpoint == "read":
			if len(e.Documents) != 1 {
				t.Fatalf("read event %d: %d documents; want 1", i, len(e.Documents))
			}
			d := e.Documents[0]
			p := i - 2 // the pages follow the two searches
			want := [2]int{next, next + len(pages[p].Content)}
			if d.DocID != testdb.DocBig || d.Range == nil || *d.Range != want || d.BudgetExhausted == nil || *d.BudgetExhausted != pages[p].BudgetExhausted {
				t.Errorf("read event %d: %+v range %v; want doc %d range %v budget_exhausted %v", i, d, d.Range, testdb.DocBig, want, pages[p].BudgetExhausted)
			}
			next = want[1]
		case a.endpoint == "turn":
			if e.RunID != run || e.Status != a.answered || len(e.Documents) != len(turnHints) {
				t.Errorf("turn event %d: run %q status %q %d documents; want %q %q %d", i, e.RunID, e.Status, len(e.Documents), run, a.answered, len(turnHints))
			}
		}
	}
	// The searches' queries: their length in UTF-16 units and their keyed HMAC.
	for i, q := range []string{refundQuery, testdb.BigDocUnit} {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(q))
		want := hex.EncodeToString(m.Sum(nil))
		if e := evs[i]; e.QueryLength == nil || *e.QueryLength != len([]rune(q)) || e.QueryHMAC != want {
			t.Errorf("search %d: query_length %v query_hmac %q; want %d and %s", i, e.QueryLength, e.QueryHMAC, len([]rune(q)), want)
		}
	}
}

// TestAuditReopen: logrotate renames the file and asks for a reload; the
// events after it go to a new file at the path, those before stay in the
// renamed one.
func TestAuditReopen(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	dir := t.TempDir()
	file := filepath.Join(dir, "audit.jsonl")
	// The clock stands still unless moved: the audit looks for a lost file
	// at most once a second of it.
	clk := testkit.NewClock(time.Now())
	app, url, admin := runBuilt(t, auditConfig(t, w, file), sidecar.Deps{Now: clk.Now})
	c := newClient(t)
	search := func() string {
		t.Helper()
		r := send(t, c, "POST", url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search", w.TokenA, []byte(`{"query":"`+refundQuery+`"}`), nil)
		if r.Status != 200 {
			t.Fatalf("search: got %d", r.Status)
		}
		return r.Header.Get("X-Request-Id")
	}
	ids := func(path string) []string {
		var out []string
		for _, e := range readAudit(t, path) {
			out = append(out, e.RequestID)
		}
		return out
	}
	before := []string{search(), search()}
	rotated := file + ".1"
	if err := os.Rename(file, rotated); err != nil {
		t.Fatal(err)
	}
	// Renamed, not reopened: the sidecar still appends to the rotated file.
	before = append(before, search())
	if r := send(t, c, "POST", admin+"/-/reload", "", nil, nil); r.Status != 200 {
		t.Fatalf("POST /-/reload: got %d %s", r.Status, r.Body)
	}
	after := []string{search(), search()}
	if got := ids(rotated); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("rotated file: %v; want the events before the reload %v", got, before)
	}
	if got := ids(file); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Errorf("new file: %v; want the events after the reload %v", got, after)
	}
	// SIGHUP calls the same App.Reload (serve.go); a second rotation by it.
	if err := os.Rename(file, rotated+"2"); err != nil {
		t.Fatal(err)
	}
	if err := app.Reload(func() (config.Config, error) { return config.Config{}, fmt.Errorf("rejected") }); err == nil {
		t.Fatal("reload of a bad configuration: want an error")
	}
	last := search()
	if got := ids(file); fmt.Sprint(got) != fmt.Sprint([]string{last}) {
		t.Errorf("after a reload whose configuration is rejected: %v; want the file reopened all the same, with %s", got, last)
	}
	// Renamed with no reload at all: a second later the next event finds
	// the file gone from its path and opens the path again.
	if err := os.Rename(file, rotated+"3"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	unasked := search()
	if got := ids(file); fmt.Sprint(got) != fmt.Sprint([]string{unasked}) {
		t.Errorf("renamed, no reload, a second later: %v; want the event in a new file at the path, %s", got, unasked)
	}
}

// TestAuditFileLost is issue 39's finding 7f: the audit file's directory is
// removed under a running sidecar with audit.on_failure: refuse. The next
// event (a second later at most) finds the file lost and the answer is 503;
// a reload answers 400 naming audit.file and keeps refusing; once the
// directory is back, a reload (or the next look, a second later) opens the
// file again and answers are served with their events.
func TestAuditFileLost(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	dir := filepath.Join(t.TempDir(), "audit")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "audit.jsonl")
	cfg := auditConfig(t, w, file)
	cfg.Audit.OnFailure = config.AuditRefuse
	clk := testkit.NewClock(time.Now())
	app, url, admin := runBuilt(t, cfg, sidecar.Deps{Now: clk.Now})
	c := newClient(t)
	search := func() turnResult {
		t.Helper()
		return send(t, c, "POST", url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search", w.TokenA, []byte(`{"query":"`+refundQuery+`"}`), nil)
	}
	if r := search(); r.Status != 200 {
		t.Fatalf("search: got %d %s", r.Status, r.Body)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	checkErrorJSON(t, search(), http.StatusServiceUnavailable, "knowledge_unavailable")

	r := send(t, c, "POST", admin+"/-/reload", "", nil, nil)
	if r.Status != 400 || !strings.Contains(string(r.Body), `"audit.file: cannot be reopened: no such file or directory"`) {
		t.Errorf("POST /-/reload with the directory gone: got %d %s; want 400 naming audit.file", r.Status, r.Body)
	}
	checkErrorJSON(t, search(), http.StatusServiceUnavailable, "knowledge_unavailable")
	if got := testkit.Metric(t, app.Server.Registry(), "knowledge_sidecar_audit_failures_total", nil); got != 2 {
		t.Errorf("audit_failures_total: got %v; want 2", got)
	}

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := send(t, c, "POST", admin+"/-/reload", "", nil, nil); r.Status != 200 {
		t.Fatalf("POST /-/reload with the directory back: got %d %s", r.Status, r.Body)
	}
	r = search()
	if r.Status != 200 {
		t.Fatalf("search with the directory back: got %d %s", r.Status, r.Body)
	}
	if evs := readAudit(t, file); len(evs) != 1 || evs[0].RequestID != r.Header.Get("X-Request-Id") {
		t.Errorf("new file: %+v; want the one event of %s", evs, r.Header.Get("X-Request-Id"))
	}
}

// TestAuditRefuse: with audit.on_failure: refuse an answer whose event
// cannot be written (a full disk: /dev/full) is 503 knowledge_unavailable;
// with continue it is sent. Both count audit_failures_total. A turn keeps
// its answer but gets no hints (SPEC §7: hints never fail a turn).
func TestAuditRefuse(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	w := NewWorld(t, WorldOptions{})
	for _, policy := range []string{config.AuditRefuse, config.AuditContinue} {
		t.Run(policy, func(t *testing.T) {
			cfg := auditConfig(t, w, "/dev/full")
			cfg.Audit.OnFailure = policy
			app, url, _ := runBuilt(t, cfg, sidecar.Deps{})
			c := newClient(t)
			ws := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti
			r := send(t, c, "POST", ws+"/knowledge/search", w.TokenA, []byte(`{"query":"`+refundQuery+`"}`), nil)
			if policy == config.AuditRefuse {
				checkErrorJSON(t, r, http.StatusServiceUnavailable, "knowledge_unavailable")
			} else if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"ref":"kr2.`)) {
				t.Fatalf("search: got %d %s; want 200 with hints", r.Status, clip(string(r.Body)))
			}
			ti := newTurn("refuse-" + policy)
			tr := send(t, c, "POST", ws+"/turns", w.TokenA, ti.body(`"on_demand"`), nil)
			if tr.Status != 200 {
				t.Fatalf("turn: got %d %s; want 200", tr.Status, tr.Body)
			}
			hints := decodeTurnHints(t, deliveryOf(t, tr.Body).Hints)
			if policy == config.AuditRefuse && len(hints) != 0 {
				t.Errorf("turn hints: got %d; want none (no event, no disclosure)", len(hints))
			}
			if policy == config.AuditContinue && len(hints) == 0 {
				t.Errorf("turn hints: got none; want them (continue)")
			}
			reg := app.Server.Registry()
			if got := testkit.Metric(t, reg, "knowledge_sidecar_audit_failures_total", nil); got != 2 {
				t.Errorf("audit_failures_total: got %v; want 2", got)
			}
			if got := testkit.Metric(t, reg, "knowledge_sidecar_audit_events_total", map[string]string{"endpoint": "search"}); got != 0 {
				t.Errorf("audit_events_total{search}: got %v; want 0", got)
			}
		})
	}
}

// TestAuditUnderLoad: two replicas, each with its own file, serve searches
// and reads from many sessions at once; every answer sent has exactly one
// event in its replica's file (counted by request id), and no event lacks
// its answer.
func TestAuditUnderLoad(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	const sessions, rounds = 12, 6
	tokens := make([]string, sessions)
	for i := range tokens {
		tokens[i] = fakecore.Token(fmt.Sprintf("audit-load-%d", i))
		w.Core.AddSession(tokens[i], corefacts.Session{
			SessionID: fmt.Sprintf("a0000000-0000-4000-8000-%012d", 100+i), ClientAppID: testdb.AppA,
			Principal: corefacts.Principal{ID: fmt.Sprintf("user-%d", i)}, OnBehalfOf: fmt.Sprintf("user-%d", i),
			AllowedRoutes: []string{testdb.RouteMulti}, ExpiresAt: time.Now().Add(15 * time.Minute),
		})
	}
	dir := t.TempDir()
	var urls, files []string
	for i := range 2 {
		f := filepath.Join(dir, fmt.Sprintf("replica-%d.jsonl", i))
		_, u, _ := runBuilt(t, auditConfig(t, w, f), sidecar.Deps{})
		urls, files = append(urls, u), append(files, f)
	}
	c := newClient(t)
	var (
		mu    sync.Mutex
		sent  = []map[string]int{{}, {}} // per replica: request id → answers
		errs  []error
		whole int // rounds whose search had hints and whose read was a page
		wg    sync.WaitGroup
	)
	// answered records an answer, whatever its status: a refusal or a
	// failure under load is an answer with an event too.
	answered := func(rep int, res turnResult) {
		mu.Lock()
		sent[rep][res.Header.Get("X-Request-Id")]++
		mu.Unlock()
	}
	for s := range sessions {
		wg.Go(func() {
			for r := range rounds {
				rep := (s + r) % 2
				ws := urls[rep] + "/agent-api/v1/workspaces/" + testdb.RouteMulti
				sr, err := trySend(c, "POST", ws+"/knowledge/search", tokens[s], []byte(`{"query":"`+refundQuery+`"}`), nil)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				answered(rep, sr)
				var a hostclient.SearchAnswer
				if sr.Status != 200 || json.Unmarshal(sr.Body, &a) != nil || len(a.Hints) == 0 {
					continue // Core slow under load: a 503 or no hints, still one answer
				}
				// read on the other replica: replicas share the key
				body, _ := json.Marshal(map[string]any{"ref": a.Hints[0].Ref})
				other := urls[1-rep] + "/agent-api/v1/workspaces/" + testdb.RouteMulti
				rr, err := trySend(c, "POST", other+"/knowledge/read", tokens[s], body, nil)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				answered(1-rep, rr)
				if rr.Status == 200 {
					mu.Lock()
					whole++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err) // a transport error: an answer lost, never expected
	}
	for i, f := range files {
		written := map[string]int{}
		for _, e := range readAudit(t, f) {
			written[e.RequestID]++
		}
		if len(written) != len(sent[i]) {
			t.Errorf("replica %d: %d request ids in its audit; want %d answers", i, len(written), len(sent[i]))
		}
		for id, n := range sent[i] {
			if n != 1 || written[id] != 1 {
				t.Errorf("replica %d request %s: %d answers, %d events; want 1 and 1", i, id, n, written[id])
			}
		}
		for id := range written {
			if sent[i][id] == 0 {
				t.Errorf("replica %d: event of request %s without an answer", i, id)
			}
		}
	}
	// The load is real only if most rounds disclosed something on both
	// replicas; a Core too slow for any would make the counts above vacuous.
	if whole < sessions*rounds/2 {
		t.Errorf("%d of %d rounds searched and read a page; want at least half", whole, sessions*rounds)
	}
}

// TestAuditRefusals is issue 39's finding 7g: the sidecar's own refusals of
// on_demand turns (a mode switch's 409, a percent-encoded route's 401, an
// unknown route's 404) and
// of MCP requests (a refused bearer's 401) are audited, one event each with
// the answer's code and the resolved client address; an inline turn's
// refusal and Core's own answers are not. Every event names the client.
func TestAuditRefusals(t *testing.T) {
	w, file, url := auditedWorld(t)
	c := newClient(t)
	ws := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti
	refused := "bha_" + strings.Repeat("r", 40) // Core knows no such token
	type want struct {
		endpoint, route, session, status, code string
	}
	var wants []want
	var ids []string
	expect := func(r turnResult, status int, w want) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: got %d %s; want %d", w.endpoint, r.Status, clip(string(r.Body)), status)
		}
		if w.endpoint != "" {
			wants = append(wants, w)
			ids = append(ids, r.Header.Get("X-Request-Id"))
		}
	}

	// A search: its event names the client too.
	expect(send(t, c, "POST", ws+"/knowledge/search", w.TokenA, []byte(`{"query":"`+refundQuery+`"}`), nil), 200,
		want{"search", testdb.RouteMulti, testdb.SessionA, "", ""})
	// A mode switch: inline bound first (Core's answer, no event), then
	// on_demand refused 409 turn_conflict.
	ti := newTurn("audit-switch")
	expect(send(t, c, "POST", ws+"/turns", w.TokenA, ti.body(`"inline"`), nil), 200, want{})
	expect(send(t, c, "POST", ws+"/turns", w.TokenA, ti.body(`"on_demand"`), nil), 409,
		want{"turn", testdb.RouteMulti, testdb.SessionA, "refused", "turn_conflict"})
	// The other way round: an inline retry of an on_demand turn is refused
	// too, but it is no on_demand turn: no event.
	tj := newTurn("audit-switch-back")
	r := send(t, c, "POST", ws+"/turns", w.TokenA, tj.body(`"on_demand"`), nil)
	expect(r, 200, want{"turn", testdb.RouteMulti, testdb.SessionA, "", ""})
	expect(send(t, c, "POST", ws+"/turns", w.TokenA, tj.body(`"inline"`), nil), 409, want{})
	// A percent-encoded route with a refused bearer: the sidecar's own 401,
	// before the body is read.
	expect(send(t, c, "POST", url+"/agent-api/v1/workspaces/kb%2Dmulti/turns", refused, newTurn("audit-401").body(`"on_demand"`), nil), 401,
		want{"turn", "", "", "refused", "unauthorized"})
	// A route segment no workspace has (upper case): 404 route_unavailable
	// after identity, for an on_demand turn; not for an inline one.
	expect(send(t, c, "POST", url+"/agent-api/v1/workspaces/KB-MULTI/turns", w.TokenA, newTurn("audit-404").body(`"on_demand"`), nil), 404,
		want{"turn", "", testdb.SessionA, "refused", "route_unavailable"})
	expect(send(t, c, "POST", url+"/agent-api/v1/workspaces/KB-MULTI/turns", w.TokenA, newTurn("audit-404i").body(`"inline"`), nil), 404, want{})
	// An MCP request with a refused bearer: 401 with its challenge.
	mcpBody := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	expect(send(t, c, "POST", ws+"/knowledge/mcp", refused, mcpBody, map[string]string{"Accept": "application/json, text/event-stream"}), 401,
		want{"mcp", testdb.RouteMulti, "", "refused", "unauthorized"})

	evs := readAudit(t, file)
	if len(evs) != len(wants) {
		for _, e := range evs {
			t.Logf("event %+v", e)
		}
		t.Fatalf("%d events; want %d, one per audited answer", len(evs), len(wants))
	}
	for i, e := range evs {
		wt := wants[i]
		if e.RequestID != ids[i] || e.Endpoint != wt.endpoint || e.Route != wt.route || e.SessionID != wt.session ||
			(wt.status != "" && e.Status != wt.status) || e.Error != wt.code {
			t.Errorf("event %d: %s %s route %q session %q %s %q; want %s %s route %q session %q %s %q", i,
				e.RequestID, e.Endpoint, e.Route, e.SessionID, e.Status, e.Error, ids[i], wt.endpoint, wt.route, wt.session, wt.status, wt.code)
		}
		if e.ClientAddr != "127.0.0.1" {
			t.Errorf("event %d (%s): client_address %q; want 127.0.0.1", i, e.Endpoint, e.ClientAddr)
		}
		if len(e.Documents) != 0 && wt.code != "" {
			t.Errorf("event %d: a refusal with documents %+v", i, e.Documents)
		}
	}
	if raw, _ := os.ReadFile(file); bytes.Contains(raw, []byte(refused)) {
		t.Error("the audit holds a refused bearer")
	}
}
