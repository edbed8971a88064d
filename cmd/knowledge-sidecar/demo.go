package main

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

//go:embed demodocs/*.md
var demoDocs embed.FS

// Demo world: one workspace "demo" backed by one knowledge base "demo-kb".
const (
	demoRoute  = "demo"
	demoKB     = "demo-kb"
	demoClient = "demo-host"
	// The fake Core's lexical scores are lower than embedding cosines, so the
	// demo route's threshold is low; it is still sent to Core as configured.
	demoKnowledge = `{"kb_ids":["demo-kb"],"top_k":8,"min_score":0.05,"inject":"chunk","max_docs":4}`
)

type demoDoc struct{ title, content string }

// loadDocs reads the .md and .txt files under dir, subfolders included (or
// the embedded samples). The title is the front matter's title, else the
// "# " heading on the first non-blank line of a .md file (topHeading), else
// the file name; YAML front matter (between
// "---" lines at the top) is not content. Empty files are skipped, each with
// a note in notes. Errors name dir as given.
func loadDocs(dir string) (docs []demoDoc, notes []string, err error) {
	var fsys fs.FS = demoDocs
	root := "demodocs"
	if dir != "" {
		st, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("--docs %s: no such folder", dir)
		case err != nil:
			return nil, nil, fmt.Errorf("--docs %s: %v", dir, errors.Unwrap(err))
		case !st.IsDir():
			return nil, nil, fmt.Errorf("--docs %s: not a folder", dir)
		}
		fsys, root = os.DirFS(dir), "."
	}
	err = fs.WalkDir(fsys, root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("--docs %s: cannot read %s", dir, filepath.Join(dir, filepath.FromSlash(path)))
		}
		if e.IsDir() && path != root && strings.HasPrefix(e.Name(), ".") {
			return fs.SkipDir // .git and other hidden folders are not documents
		}
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".md" && ext != ".txt") {
			return nil
		}
		raw, err := fs.ReadFile(fsys, path)
		if err != nil {
			return fmt.Errorf("--docs %s: cannot read %s", dir, filepath.Join(dir, filepath.FromSlash(path)))
		}
		content := strings.ToValidUTF8(string(raw), "\uFFFD")
		fmTitle, body := splitFrontMatter(content)
		if strings.TrimSpace(body) == "" {
			notes = append(notes, fmt.Sprintf("skipped %s: it is empty", filepath.Join(dir, filepath.FromSlash(path))))
			return nil
		}
		title := strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))
		if fmTitle != "" {
			title = fmTitle
		} else if t := topHeading(body); ext == ".md" && t != "" {
			title = t
		}
		if r := []rune(title); len(r) > 191 { // bz_kb_docs.title is VARCHAR(191)
			title = string(r[:191])
		}
		docs = append(docs, demoDoc{title: title, content: body})
		return nil
	})
	if err != nil {
		return nil, notes, err
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].title < docs[j].title })
	if len(docs) == 0 {
		return nil, notes, fmt.Errorf("--docs %s: no non-empty .md or .txt files in it or its subfolders", dir)
	}
	return docs, notes, nil
}

// topHeading is the text of a Markdown "# " heading on the first non-blank
// line of body, or "" (a heading further down titles a section, not the
// document).
func topHeading(body string) string {
	for _, line := range strings.Split(strings.TrimPrefix(body, "\uFEFF"), "\n") {
		l := strings.TrimSpace(line)
		if l == "" {
			continue
		}
		t, _ := strings.CutPrefix(l, "# ")
		if t == l {
			return ""
		}
		return strings.TrimSpace(t)
	}
	return ""
}

// splitFrontMatter separates YAML front matter ("---" on the first line up
// to the next "---" or "..." line) from the body, and returns its title
// field (quotes removed) if it has one. Without a closing line there is no
// front matter.
func splitFrontMatter(content string) (title, body string) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(content, "\uFEFF"), "---")
	if !ok {
		return "", content
	}
	first, rest, ok := strings.Cut(rest, "\n")
	if !ok || strings.TrimSpace(first) != "" {
		return "", content
	}
	lines := strings.SplitAfter(rest, "\n")
	for i, line := range lines {
		if l := strings.TrimSpace(line); l == "---" || l == "..." {
			for _, fm := range lines[:i] {
				if v, ok := strings.CutPrefix(strings.TrimSpace(fm), "title:"); ok {
					title = strings.Trim(strings.TrimSpace(v), `"'`)
				}
			}
			return strings.TrimSpace(title), strings.TrimLeft(strings.Join(lines[i+1:], ""), "\r\n")
		}
	}
	return "", content
}

// plural is "1 document", "2 documents".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func randomToken(prefix string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "sidecar listen address")
	adminListen := fs.String("admin-listen", "127.0.0.1:9090", "admin listen address")
	docsDir := fs.String("docs", "", "directory of .md/.txt files to use as the demo knowledge base (default: built-in samples)")
	token := fs.String("demo-token", "", "Agent access token to accept (default: random, printed)")
	logLevel := fs.String("log-level", "warn", "the sidecar's log level on stderr: debug (every request), info, warn or error")
	useSQL := fs.Bool("sql", false, "rehearse the production path: the SQL catalog on a throwaway database of a local MySQL/MariaDB, read through a user with exactly the documented GRANTs (dropped on exit)")
	sqlDSN := fs.String("sql-dsn", defaultRehearsalDSN, "with --sql: an admin DSN of the local server, allowed to create and drop databases and users")
	auditFile := fs.String("audit", "", "write the disclosure audit (one JSON line per answer that discloses documents, docs/audit.md) to this file: appended, created 0600")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *token == "" {
		*token = randomToken("bha_")
	} else if !fakecore.ValidAccessToken(*token) {
		fmt.Fprintln(stderr, "--demo-token must look like a Core Agent token: bha_ followed by at least 36 URL-safe characters")
		return 2
	}
	if *auditFile == "-" {
		fmt.Fprintln(stderr, "--audit takes a file path (standard output carries the walkthrough)")
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stderr, "--log-level must be debug, info, warn or error")
		return 2
	}
	docs, notes, err := loadDocs(*docsDir)
	for _, n := range notes {
		fmt.Fprintln(stderr, "demo:", n)
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	level := new(slog.LevelVar)
	level.Set(lvl)
	log := newLogger(stderr, level)

	ignoreSIGPIPE() // the walkthrough on stdout may be piped to a reader that exits
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var rh *rehearsal
	if *useSQL {
		if rh, err = startRehearsal(ctx, *sqlDSN, docs); err != nil {
			fmt.Fprintln(stderr, "demo --sql:", err)
			return 1
		}
		defer rh.drop(stderr)
	}
	var onRun func(corefacts.Run)
	if rh != nil {
		onRun = rh.putRun(log)
	}
	w, err := startDemoWorld(docs, *token, onRun)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer w.close()

	// The demo's configuration is made here, not read: only the listen
	// flags come from the user, and Run says clearly if they are unusable.
	cfg := w.config(*listen, *adminListen)
	auditPath := "" // the walkthrough's step 8 when set
	if *auditFile != "" {
		// Absolute, so that the walkthrough's jq line works from any folder.
		abs, err := filepath.Abs(*auditFile)
		if err != nil {
			fmt.Fprintln(stderr, "demo: --audit:", err)
			return 2
		}
		cfg.Audit.Enabled, cfg.Audit.File, auditPath = true, abs, abs
	}
	b := readBuildInfo()
	deps := sidecar.Deps{Logger: log, Level: level, Version: b.Version, Revision: b.Revision, Catalog: w.catalog, SingleProcess: true}
	if rh != nil {
		// serve's own build: the SQL catalog behind its schema gate.
		cfg.Catalog.DSN, deps.Catalog = rh.db.ReadOnlyDSN, nil
	}
	app, err := sidecar.Build(ctx, cfg, deps)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer app.Close()
	so := serveOptions(cfg)
	so.OnListening = func(p, a net.Addr) {
		printWalkthrough(stdout, p.String(), a.String(), *token, docs, walkthroughQueries(docs, *docsDir != ""), auditPath)
		if cfg.MCP.OAuth.ClientAppID != "" {
			step := 8 // after the audit's step 8 with --audit
			if auditPath != "" {
				step = 9
			}
			printSignIn(stdout, p.String(), step)
		}
		if rh != nil {
			rh.printChecks(stdout, cfg, p.String(), a.String(), *token)
		}
	}
	err = app.Server.Run(ctx, so)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// demoWorld is the fake Core on a loopback port and the in-memory catalog,
// seeded with the same documents.
type demoWorld struct {
	core    *fakecore.Core
	srv     *http.Server
	coreURL string
	catalog *catalog.MemCatalog
	service string // the sidecar's Core service token
	// biz is the business system's consent page (the sign-in client's
	// agent_authorize_url), where a user approves an MCP host's sign-in.
	biz    *http.Server
	bizURL string
}

// onRun, when not nil, is told of every run a turn creates (the SQL
// catalog's rows); else the in-memory catalog holds them.
func startDemoWorld(docs []demoDoc, token string, onRun func(corefacts.Run)) (*demoWorld, error) {
	w := &demoWorld{catalog: catalog.NewMemCatalog(), service: randomToken("svc_")}
	if onRun == nil {
		onRun = w.catalog.PutRun
	}
	w.core = fakecore.New(fakecore.Options{
		ServiceToken: w.service,
		SystemInfo:   true,
		OnRun:        onRun, // runs the fake creates become visible to the catalog
	})
	w.core.AddKB(demoKB)
	w.catalog.PutKB(demoKB, true)
	w.catalog.PutRoute(demoRoute, true, demoKnowledge)
	w.catalog.PutClient(demoClient, true, []string{demoRoute}, "http://127.0.0.1:8765/callback")
	w.core.SetRoute(demoRoute, fakecore.GateAllowed)
	now := time.Now().UTC().Truncate(time.Second)
	for i, d := range docs {
		id := int64(i + 1)
		w.core.AddDoc(demoKB, id, d.title, d.content)
		w.catalog.PutDoc(corefacts.Document{
			DocMeta: corefacts.DocMeta{DocID: id, KBID: demoKB, Title: d.title, Status: "ready", UpdatedAt: now},
			Content: d.content,
		})
	}
	// A turn retrieves from its user_input with the route's knowledge config,
	// ranked like /kb/search (demoKnowledge: top_k 8, min_score 0.05).
	w.core.SetTurnRetrieval(demoRoute, fakecore.TurnRetrieval{KBIDs: []string{demoKB}, TopK: 8, MinScore: 0.05})
	w.core.AddSession(token, corefacts.Session{
		SessionID:     "6f1c2f7e-5a53-4d52-9a0e-3f3b5f0c9d11",
		ClientAppID:   demoClient,
		Principal:     corefacts.Principal{ID: "demo-user", Tenant: "demo-tenant", Roles: []string{"agent"}},
		OnBehalfOf:    "demo-tenant:demo-user",
		AllowedRoutes: []string{demoRoute},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w.srv = &http.Server{Handler: w.core, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	w.coreURL = "http://" + ln.Addr().String()

	// The business system's consent page, the demo client's
	// agent_authorize_url: MCP hosts sign in there (SPEC §12).
	bizLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.close()
		return nil, err
	}
	clientToken := randomToken("bct_")
	page := fakecore.NewConsent(fakecore.ConsentOptions{CoreURL: w.coreURL, ClientToken: clientToken,
		Principal: corefacts.Principal{ID: "demo-user", Tenant: "demo-tenant", Roles: []string{"agent"}}, OnBehalfOf: "demo-tenant:demo-user"})
	w.biz = &http.Server{Handler: page, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.biz.Serve(bizLn) }()
	w.bizURL = "http://" + bizLn.Addr().String() + "/consent"
	w.core.AddAuthClient(fakecore.AuthClient{AppID: demoClient, AuthorizeURL: w.bizURL,
		AllowedRoutes: []string{demoRoute}, Token: clientToken})
	return w, nil
}

func (w *demoWorld) close() {
	w.core.Close()
	_ = w.srv.Close()
	if w.biz != nil {
		_ = w.biz.Close()
	}
}

// config is the demo's configuration: the defaults, over the demo world's
// Core, rolled out for the demo route, quick to stop. The sidecar itself is
// built as `serve` builds it (sidecar.Build), with the in-memory catalog in
// place of the SQL one.
func (w *demoWorld) config(listen, adminListen string) config.Config {
	cfg := config.Defaults()
	cfg.Listen, cfg.AdminListen = listen, adminListen
	cfg.Core.URL, cfg.Core.Token = w.coreURL, w.service
	cfg.Rollout = "allow:" + demoRoute
	cfg.Shutdown.DrainDelay, cfg.Shutdown.Timeout = 0, 5*time.Second
	// MCP hosts sign in through the Core double's Agent Auth when the
	// listener's address is known before it listens (a fixed loopback port:
	// it is the issuer).
	if host, port, err := net.SplitHostPort(listen); err == nil && port != "0" && port != "" {
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			cfg.MCP.PublicURL = "http://" + listen
			cfg.MCP.OAuth.ClientAppID = demoClient
		}
	}
	return cfg
}

// printSignIn is the walkthrough's step for MCP hosts that sign in with
// only the URL (SPEC §12), printed when the demo serves the OAuth front.
func printSignIn(w io.Writer, addr string, step int) {
	fmt.Fprintf(w, `
  # %[3]d. An MCP host given only the URL signs the user in through Core's Agent Auth: the sidecar is
  #    its OAuth server, the demo's business system shows the consent page (approve / deny) in
  #    your browser, and the host refreshes its tokens itself (docs/hosts.md). The 401 a host
  #    meets first, and the metadata it discovers from it:
  curl -si -X POST http://%[1]s/agent-api/v1/workspaces/%[2]s/knowledge/mcp | grep -i www-authenticate
  curl -s http://%[1]s/.well-known/oauth-authorization-server | jq .
  #    Then, in a host that implements MCP authorization, e.g. Claude Code:
  #      claude mcp add --transport http bailinghub-demo http://%[1]s/agent-api/v1/workspaces/%[2]s/knowledge/mcp
  #    and /mcp → Authenticate; or the MCP TypeScript SDK with an authProvider (test/mcpjs/oauth.mjs).
`, addr, demoRoute, step)
}

// queries are the walkthrough's search (step 2) and read (step 3) queries.
type queries struct{ search, read string }

// walkthroughQueries uses the built-in samples' questions, or, for the
// user's own documents, their titles: the first document's title to search,
// the longest document's title to read page by page.
func walkthroughQueries(docs []demoDoc, own bool) queries {
	if !own || len(docs) == 0 {
		return queries{search: "What happens if the refund window is set to 0?", read: "operations handbook procedure"}
	}
	longest := docs[0]
	for _, d := range docs[1:] {
		if len(d.content) > len(longest.content) {
			longest = d
		}
	}
	return queries{search: docs[0].title, read: longest.title}
}

// shellJSON renders a JSON body as a single-quoted shell word.
func shellJSON(v any) string { return "'" + shellJSONArg(v) + "'" }

// shellJSONArg is v's JSON for the inside of a single-quoted shell word.
func shellJSONArg(v any) string {
	b, _ := json.Marshal(v)
	return strings.ReplaceAll(string(b), "'", `'\''`)
}

// auditStep is the walkthrough's step 8 with --audit: one jq line over the
// audit file (path quoted for the shell).
func auditStep(file string) string {
	if file == "" {
		return ""
	}
	return `
  # 8. The disclosure audit (--audit): one JSON line per answer that discloses documents (or
  #    refuses to) — who saw which documents, never the query, a ref or the text (docs/audit.md):
  jq -c '{time, endpoint, status, principal_id, error, docs: [.documents[].doc_id]}' '` + strings.ReplaceAll(file, "'", `'\''`) + `'
`
}

// printWalkthrough prints the demo's addresses and copy-paste steps; audit
// is the audit file with --audit ("" without).
func printWalkthrough(w io.Writer, addr, admin, token string, docs []demoDoc, q queries, audit string) {
	base := "http://" + addr + "/agent-api/v1/workspaces/" + demoRoute
	fmt.Fprintf(w, `knowledge-sidecar demo is running.

  sidecar   http://%s   (in front of a built-in Core double; workspace %q rolled out)
  admin     http://%s/metrics  /healthz  /readyz
  knowledge %s in KB %q
  token     %s

The Core double ranks search hits by shared keywords, not by embeddings as a real
Core does: ask with words that occur in the documents. Sidecar logs: --log-level.

Copy-paste walkthrough, in another terminal (needs curl and jq: steps 3 and 4 take the ref,
the cursor and the run_id out of answers with jq -r):

  export TOKEN=%s
  export WS=%s

  # 1. Negotiate: does this workspace support on-demand knowledge?
  curl -s -H "Authorization: Bearer $TOKEN" $WS/knowledge/capabilities | jq .

  # 2. Search: at most 3 hints, the whole answer <= 4096 bytes, each with a signed 5-minute ref.
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
       -d %s $WS/knowledge/search | jq .

  # 3. Read a document page by page (pages are bounded by max_bytes, the chain by 128 KiB).
  REF=$(curl -s -H "Authorization: Bearer $TOKEN" -d %s \
        $WS/knowledge/search | jq -r '.hints[0].ref')
  PAGE=$(curl -s -H "Authorization: Bearer $TOKEN" -d "{\"ref\":\"$REF\",\"max_bytes\":32768}" $WS/knowledge/read)
  echo "$PAGE" | jq '{title, bytes: (.content|length), next_cursor: (.next_cursor != null), truncated, budget_exhausted, total_content_bytes}'
  # ...and the next page, passing the cursor back verbatim:
  CURSOR=$(echo "$PAGE" | jq -r .next_cursor)
  curl -s -H "Authorization: Bearer $TOKEN" -d "{\"ref\":\"$REF\",\"max_bytes\":32768,\"cursor\":\"$CURSOR\"}" $WS/knowledge/read \
       | jq '{bytes: (.content|length), next_cursor: (.next_cursor != null), truncated, budget_exhausted}'

  # 4. A turn with on-demand knowledge: inline knowledge comes back empty, plus a delivery block
  #    whose hints are what Core retrieved for this turn, with refs bound to the turn's run.
  TURN=$(curl -s -H "Authorization: Bearer $TOKEN" -d '{"client_conversation_id":"c1","client_turn_id":"t1",
       "user_message_id":"m1","user_input":"Can I get a refund?","knowledge_delivery":"on_demand"}' $WS/turns)
  echo "$TURN" | jq '{run_id, knowledge: .context.knowledge, knowledge_delivery}'
  # Read a turn hint directly, with the turn's run_id (without it: 400 knowledge_reference_invalid):
  curl -s -H "Authorization: Bearer $TOKEN" -d "$(echo "$TURN" | jq -c '{ref: .knowledge_delivery.hints[0].ref, run_id}')" \
       $WS/knowledge/read | jq '{title, run_id, bytes: (.content|length), next_cursor: (.next_cursor != null)}'
  # Retrying the same turn in another mode is a conflict (no second run at Core):
  curl -s -H "Authorization: Bearer $TOKEN" -d '{"client_conversation_id":"c1","client_turn_id":"t1",
       "user_message_id":"m1","user_input":"Can I get a refund?","knowledge_delivery":"inline"}' $WS/turns | jq .

  # 5. Everything else passes through unchanged, e.g. Core's own answer for an unknown path:
  curl -s -H "Authorization: Bearer $TOKEN" http://%s/agent-api/v1/unknown | jq .

  # 6. Errors are defined, never leaky: a forged reference.
  curl -s -H "Authorization: Bearer $TOKEN" -d '{"ref":"kr2.core.forged"}' $WS/knowledge/read | jq .

  # 7. The same knowledge for an MCP host that takes a URL: $WS/knowledge/mcp with the bearer
  #    (stateless Streamable HTTP; host configurations in docs/hosts.md). One tool call by hand,
  #    and the text the model reads:
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
       -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' \
       -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_search","arguments":%s}}' \
       $WS/knowledge/mcp | jq -r '.result.content[0].text'
%s
Documents: %s
Press Ctrl-C to stop (started in the background with &: kill %%1, or kill the binary's PID;
"kill $!" after "go run ... &" stops only go run, not the demo).
`, addr, demoRoute, admin, plural(len(docs), "document", "documents"), demoKB, token, token, base,
		shellJSON(map[string]any{"query": q.search, "limit": 3}), shellJSON(map[string]any{"query": q.read, "limit": 1}),
		addr, shellJSONArg(map[string]any{"query": q.search}), auditStep(audit), titles(docs))
}

func titles(docs []demoDoc) string {
	var t []string
	for _, d := range docs {
		t = append(t, d.title)
	}
	return strings.Join(t, "; ")
}
