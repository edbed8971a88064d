package knowledge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// refBenchCases are a typical reference (the test keyring, a 64-byte KB id)
// and the longest one (16-character key id, 128-byte KB id).
func refBenchCases(b *testing.B) []struct {
	name   string
	keys   *Keyring
	claims RefClaims
} {
	longest := sampleClaims()
	longest.KBID = strings.Repeat("k", maxKBIDLen)
	return []struct {
		name   string
		keys   *Keyring
		claims RefClaims
	}{
		{"typical", testKeys(b), sampleClaims()},
		{"longest", mustKeyring(b, strings.Repeat("Z", maxKeyIDLen)+":"+secret('w'), ""), longest},
	}
}

func BenchmarkSealRef(b *testing.B) {
	for _, bc := range refBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.keys.SealRef(bc.claims); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpenRef(b *testing.B) {
	for _, bc := range refBenchCases(b) {
		ref, _ := bc.keys.SealRef(bc.claims)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.keys.OpenRef(ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSealCursor(b *testing.B) {
	k := testKeys(b)
	c := CursorClaims{Expiry: t0, RefDigest: RefDigest("kr2.k1.x"), NextOffset: 16384, Served: 16384}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.SealCursor(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenCursor(b *testing.B) {
	k := testKeys(b)
	cur, _ := k.SealCursor(CursorClaims{Expiry: t0, RefDigest: RefDigest("kr2.k1.x"), NextOffset: 16384, Served: 16384})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.OpenCursor(cur); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSearchAssembly(b *testing.B) {
	k := testKeys(b)
	r := rand.New(rand.NewPCG(1, 1))
	ref, _ := k.SealRef(sampleClaims())
	var hints []Hint
	for i := 0; i < 3; i++ {
		hints = append(hints, Hint{Ref: ref, Title: nastyString(r, 190), Summary: nastyString(r, SummaryMaxBytes),
			Revision: strings.Repeat("b", 64), Score: 0.8, ExpiresAt: t0})
	}
	b.ReportAllocs()
	for b.Loop() {
		body := SearchBody{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Status: protocol.StatusOK,
			Hints: append([]Hint(nil), hints...)}
		body.Fit(protocol.SearchMaxBytes)
		if out := body.AppendJSON(make([]byte, 0, protocol.SearchMaxBytes)); len(out) > protocol.SearchMaxBytes {
			b.Fatal("over budget")
		}
	}
}

// BenchmarkReadPage32K plans and writes one 32 KiB page of an adversarial
// 300 000-character document (target: well under 100 µs).
func BenchmarkReadPage32K(b *testing.B) {
	k := testKeys(b)
	r := rand.New(rand.NewPCG(2, 2))
	content := string([]rune(nastyString(r, 1_200_000))[:300_000])
	ref, _ := k.SealRef(sampleClaims())
	cursor, _ := k.SealCursor(CursorClaims{Expiry: t0})
	p := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: ref,
		Revision: strings.Repeat("b", 64), Title: "标题", Content: content, Offset: 50_000, Served: 50_000}
	p.Offset = boundaryAtOrBefore(content, p.Offset)
	buf := make([]byte, 0, protocol.ReadMaxBytes)
	b.ReportAllocs()
	b.SetBytes(protocol.ReadMaxBytes)
	for b.Loop() {
		plan, ok := p.Plan(protocol.ReadMaxBytes, k.cursorLen())
		if !ok {
			b.Fatal("no plan")
		}
		if out := p.AppendJSON(buf[:0], plan, cursor); len(out) > protocol.ReadMaxBytes {
			b.Fatal("over budget")
		}
	}
}

// jsonBenchTexts are 32 KiB page texts: the load tool's Markdown document
// (mostly ASCII, a few CJK words, quotes and a backslash), the same with
// every non-ASCII character dropped, and Chinese prose; all with newlines.
func jsonBenchTexts() []struct{ name, text string } {
	const size = 32 << 10
	_, md := testkit.Document(1, 2*size)
	ascii := strings.Map(func(r rune) rune {
		if r >= utf8.RuneSelf {
			return -1
		}
		return r
	}, md)
	var cjk strings.Builder
	for n := 0; cjk.Len() < 2*size; n++ {
		if n%8 == 0 {
			fmt.Fprintf(&cjk, "\n\n## 第%d节 退货政策\n\n", n/8)
		}
		cjk.WriteString("顾客在收到商品后三十天内可以申请退款，仓库收到退回的包裹并检查无损后，客服会在两个工作日内处理。")
	}
	cut := func(s string) string { return s[:boundaryAtOrBefore(s, size)] }
	return []struct{ name, text string }{{"markdown", cut(md)}, {"ascii", cut(ascii)}, {"cjk", cut(cjk.String())}}
}

// BenchmarkJSONText measures the three text passes of a read page over a
// 32 KiB text: fitting it to a budget, sizing it and writing it.
func BenchmarkJSONText(b *testing.B) {
	for _, tt := range jsonBenchTexts() {
		budget := JSONStringLen(tt.text) - 2
		buf := make([]byte, 0, budget+2)
		b.Run(tt.name+"/FitPrefix", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.text)))
			for b.Loop() {
				if n, _ := FitPrefix(tt.text, budget); n != len(tt.text) {
					b.Fatalf("FitPrefix took %d of %d bytes", n, len(tt.text))
				}
			}
		})
		b.Run(tt.name+"/JSONStringLen", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.text)))
			for b.Loop() {
				if JSONStringLen(tt.text) != budget+2 {
					b.Fatal("length changed")
				}
			}
		})
		b.Run(tt.name+"/AppendJSONString", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.text)))
			for b.Loop() {
				if out := AppendJSONString(buf[:0], tt.text); len(out) != budget+2 {
					b.Fatalf("wrote %d bytes; want %d", len(out), budget+2)
				}
			}
		})
	}
}

// ---- end-to-end search and read with zero-latency fakes ----

// benchCatalog is the in-memory catalog (the route's knowledge column is
// stored raw and normalized on every Route call, as the SQL catalog does)
// with the documents served as the SQL catalog serves them on a revision
// cache hit: body and revision precomputed, fenced to the requested KBs.
type benchCatalog struct {
	*catalog.MemCatalog
	docs map[int64]corefacts.Document
}

func (c *benchCatalog) Documents(_ context.Context, ids []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	out := make(map[int64]corefacts.Document, len(ids))
	for _, id := range ids {
		if d, ok := c.docs[id]; ok && slices.Contains(kbIDs, d.KBID) {
			out[id] = d
		}
	}
	return out, nil
}

// RouteBundle reads through benchCatalog's own methods: MemCatalog's,
// promoted, would read MemCatalog's documents, not these.
func (c *benchCatalog) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	return composeBundle(ctx, c, key, kbIDs, docID)
}

func (c *benchCatalog) Document(_ context.Context, id int64, kbIDs []string) (corefacts.Document, error) {
	d, ok := c.docs[id]
	if !ok || !slices.Contains(kbIDs, d.KBID) {
		return corefacts.Document{}, corefacts.ErrNotFound
	}
	return d, nil
}

const (
	benchKB     = "bench-kb"
	benchDocs   = 12
	benchDocLen = 40 << 10
	benchQuery  = `{"query":"refund window shipping carrier","limit":3}`
)

// newBenchService is a Service over zero-latency fakes with the load tool's
// corpus: 12 documents of 40 KiB, a route with top_k 8, and a Core search
// that answers 8 chunk hits spread over 6 documents.
func newBenchService(b *testing.B, opts ...func(*Options)) *Service {
	b.Helper()
	cat := &benchCatalog{MemCatalog: catalog.NewMemCatalog(), docs: map[int64]corefacts.Document{}}
	cat.PutKB(benchKB, true)
	cat.PutRoute(routeKey, true, `{"kb_ids":["`+benchKB+`"],"top_k":8,"min_score":0.01,"inject":"chunk","max_docs":4}`)
	var hits []corefacts.Hit
	for i := 1; i <= benchDocs; i++ {
		title, content := testkit.Document(i, benchDocLen)
		d := corefacts.Document{
			DocMeta: corefacts.DocMeta{DocID: int64(i), KBID: benchKB, Title: title, Status: "ready", UpdatedAt: t0},
			Content: content, Revision: corefacts.Revision(title, content),
		}
		cat.docs[d.DocID] = d
		if i <= 6 {
			ch := fakecore.Chunks(content)
			for _, j := range []int{3, 11} {
				if len(hits) < 8 && j < len(ch) {
					hits = append(hits, corefacts.Hit{KBID: benchKB, DocID: d.DocID, Seq: j, Title: title, Content: ch[j],
						Score: 0.9 - 0.05*float64(len(hits))})
				}
			}
		}
	}
	id := &fakeIdentity{sessions: map[string]corefacts.Session{tokA: sessionA}, sysInfo: map[string]error{}}
	ret := &fakeRetriever{hits: map[string][]corefacts.Hit{benchKB: hits}}
	o := Options{Identity: id, Retriever: ret, Catalog: cat, Keys: testKeys(b), Now: func() time.Time { return t0 },
		RateLimit: 1e9, RateBurst: 1 << 30}
	for _, fn := range opts {
		fn(&o)
	}
	svc, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

// BenchmarkServiceSearch is one whole search (identity, route gate, route
// row, KB flags, Core search, re-check of every hit against the current
// document, refs, summaries, budget) with zero-latency fakes: the sidecar's
// own CPU per search, without the HTTP round trips to Core.
func BenchmarkServiceSearch(b *testing.B) {
	svc := newBenchService(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := svc.Search(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(benchQuery))
		if err != nil || !bytes.Contains(out, []byte(`"hints":[{`)) {
			b.Fatalf("got %v, %s; want hints", err, out)
		}
	}
}

// benchReadBody is the body of a 32 KiB read of the first hint of svc's
// search for benchQuery.
func benchReadBody(b *testing.B, svc *Service) string {
	b.Helper()
	out, err := svc.Search(context.Background(), tokA, testkit.RouteKey(routeKey), strings.NewReader(benchQuery))
	var res struct {
		Hints []struct{ Ref string } `json:"hints"`
	}
	if err != nil || json.Unmarshal(out, &res) != nil || len(res.Hints) == 0 {
		b.Fatalf("got %v, %s; want hints", err, out)
	}
	return `{"ref":"` + res.Hints[0].Ref + `","max_bytes":32768}`
}

// BenchmarkServiceRead is one whole 32 KiB read (identity, route gate, route
// row, ref and binding checks, KB flag, document, page) with zero-latency
// fakes.
func BenchmarkServiceRead(b *testing.B) {
	svc := newBenchService(b)
	ctx := context.Background()
	body := benchReadBody(b, svc)
	b.ReportAllocs()
	for b.Loop() {
		out, err := svc.Read(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(body))
		if err != nil || len(out) < protocol.ReadMaxBytes/2 {
			b.Fatalf("got %v with %d bytes; want a page", err, len(out))
		}
	}
}

// stripSpaceRef is the plain definition stripSpace must keep: every rune
// that is not JavaScript whitespace (the fake Core's IsJSSpace, which its
// chunker uses), invalid bytes as U+FFFD.
func stripSpaceRef(s string) string {
	var b strings.Builder
	for _, r := range s {
		if !fakecore.IsJSSpace(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestStripSpaceMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	inputs := []string{"", " ", "a", " a b ", "\t\n\v\f\r x", "\u0085\u00a0\u1680\u2000\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff",
		"退款 窗口\u3000设为0", "\xff", "a\xffb \xc3", "\xe2\x80", "\xed\xa0\x80", "no-space-at-all", refundContent}
	for i := 0; i < 2000; i++ {
		inputs = append(inputs, nastyString(r, r.IntN(64)))
	}
	for i, in := range inputs {
		if got, want := stripSpace(in), stripSpaceRef(in); got != want {
			t.Fatalf("input %d %q: got %q; want %q", i, in, got, want)
		}
	}
	// Every rune up to U+3100, alone and between letters.
	for c := rune(0); c <= 0x3100; c++ {
		in := "a" + string(c) + "b"
		if got, want := stripSpace(in), stripSpaceRef(in); got != want {
			t.Fatalf("U+%04X: got %q; want %q", c, got, want)
		}
	}
}

func FuzzStripSpace(f *testing.F) {
	f.Add("退款 窗口\u3000设为0\n\n![图](x)")
	f.Add("a\xffb \xc3\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := stripSpace(s), stripSpaceRef(s); got != want {
			t.Fatalf("%q: got %q; want %q", s, got, want)
		}
	})
}

// TestDocMatchAgreesWithNormalizedContains: the shortcut of docMatch gives
// strings.Contains(normalizeForMatch(doc), frag) for fragments cut from the
// document (with their whitespace changed, as Core's chunker does),
// fragments that are not in it, and documents where the shortcut does not
// apply (images, "图", invalid UTF-8) or gives up (long near-misses).
func TestDocMatchAgreesWithNormalizedContains(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	docs := []string{refundContent, shipContent, policyContent, "", "a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
		strings.Repeat("ab ", 500) + "abc", "x\xffy z\u3000w", "no 图 here? 图 yes", "[ 图 ： ] text"}
	for i := 1; i <= 3; i++ {
		_, d := testkit.Document(i, 4<<10)
		docs = append(docs, d)
	}
	for range 200 {
		docs = append(docs, nastyString(r, r.IntN(300)))
	}
	respace := func(s string) string {
		var b strings.Builder
		for _, c := range s {
			switch r.IntN(8) {
			case 0:
				b.WriteString("\n")
			case 1:
				continue // drop whitespace, or keep it below
			}
			if unicode.IsSpace(c) && r.IntN(2) == 0 {
				continue
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	for di, doc := range docs {
		m := newDocMatch(doc)
		want := normalizeForMatch(doc)
		var frags []string
		for range 30 {
			if len(doc) == 0 {
				break
			}
			a := r.IntN(len(doc))
			b := a + r.IntN(min(len(doc)-a, 200)+1)
			frags = append(frags, doc[a:b], respace(doc[a:b]))
		}
		frags = append(frags, "", "a", "ab", "aab", "abc", "refund", "退款", "[图：流程图]超过", "y", "\ufffd", "z\u3000w", nastyString(r, 5),
			"\ufffda", "a\ufffd", "\ufffd&\ufffd", "\ufffd\ufffd")
		for _, raw := range frags {
			frag := normalizeForMatch(raw)
			if got, exp := m.contains(frag), containsRef(want, frag); got != exp {
				t.Fatalf("doc %d %.60q, fragment %q: got %v; want %v", di, doc, frag, got, exp)
			}
		}
	}
}

// containsRef is the plain definition of docMatch.contains over the
// normalized document: frag occurs in norm, except that a U+FFFD at frag's
// start or end (half of a character Core's chunker cut in two) stands for
// one character above U+FFFF or a U+FFFD. It tries every start position.
func containsRef(norm, frag string) bool {
	lead := strings.HasPrefix(frag, "\ufffd")
	if lead {
		frag = frag[len("\ufffd"):]
	}
	trail := strings.HasSuffix(frag, "\ufffd")
	if trail {
		frag = frag[:len(frag)-len("\ufffd")]
	}
	if !lead && !trail {
		return strings.Contains(norm, frag)
	}
	half := func(s string) (int, bool) {
		r, n := utf8.DecodeRuneInString(s)
		return n, n > 0 && (r > 0xFFFF || r == utf8.RuneError)
	}
	for start := 0; start <= len(norm); start++ {
		if start < len(norm) && !utf8.RuneStart(norm[start]) {
			continue
		}
		p := start
		if lead {
			n, ok := half(norm[p:])
			if !ok {
				continue
			}
			p += n
		}
		if !strings.HasPrefix(norm[p:], frag) {
			continue
		}
		if trail {
			if _, ok := half(norm[p+len(frag):]); !ok {
				continue
			}
		}
		return true
	}
	return false
}

func FuzzDocMatch(f *testing.F) {
	f.Add(refundContent, "窗口设为0时，订单")
	f.Add("ab ab ab abc", "abc")
	f.Add("x\xffy", "y")
	f.Fuzz(func(t *testing.T, doc, raw string) {
		frag := normalizeForMatch(raw)
		if got, want := newDocMatch(doc).contains(frag), containsRef(normalizeForMatch(doc), frag); got != want {
			t.Fatalf("doc %q, fragment %q: got %v; want %v", doc, frag, got, want)
		}
	})
}

// collapseSpaceRef is the plain definition collapseSpace must keep.
func collapseSpaceRef(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if fakecore.IsJSSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

func TestCollapseSpaceMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	inputs := []string{"", " ", "  a  ", "a \t\n b", "\u3000退款\u2028 窗口\u00a0", "\xffa \xff", " \xff ", "a\xc3 b", refundContent}
	for i := 0; i < 2000; i++ {
		inputs = append(inputs, nastyString(r, r.IntN(64)))
	}
	for c := rune(0); c <= 0x3100; c++ {
		inputs = append(inputs, " a"+string(c)+"b "+string(c))
	}
	for i, in := range inputs {
		want := collapseSpaceRef(in)
		if got := collapseSpace(in, -1); got != want {
			t.Fatalf("input %d %q: got %q; want %q", i, in, got, want)
		}
		// With a limit: a prefix of the whole result, at least limit bytes
		// long (or all of it).
		for _, limit := range []int{0, 1, 3, 7} {
			got := collapseSpace(in, limit)
			if !strings.HasPrefix(want, got) || len(got) < min(limit, len(want)) {
				t.Fatalf("input %d %q limit %d: got %q; want a prefix of %q of at least %d bytes", i, in, limit, got, want, limit)
			}
		}
	}
}

func FuzzCollapseSpace(f *testing.F) {
	f.Add(" 退款 \u3000窗口\n\n\xff x ")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := collapseSpace(s, -1), collapseSpaceRef(s); got != want {
			t.Fatalf("%q: got %q; want %q", s, got, want)
		}
	})
}

// BenchmarkCatalogRoute is one Route call of the in-memory catalog, which
// shares the SQL catalog's handling of the raw knowledge column (without the
// query): what every search, read, capabilities and intercepted turn pays
// for the route's configuration.
func BenchmarkCatalogRoute(b *testing.B) {
	cat := catalog.NewMemCatalog()
	cat.PutRoute(routeKey, true, `{"kb_ids":["`+benchKB+`","faq"],"top_k":8,"min_score":0.01,"inject":"chunk","max_docs":4}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, err := cat.Route(ctx, testkit.RouteKey(routeKey)); err != nil || r.Knowledge == nil {
			b.Fatalf("got %+v, %v; want a route with knowledge", r, err)
		}
	}
}

// newSQLBenchService is newBenchService over the production SQL catalog on
// a fresh MariaDB database (internal/testkit/testdb; KS_TEST_MYSQL_DSN) seeded with the
// same corpus, read as the read-only user: the catalog's statements, the
// driver and the revision cache are the sidecar's own. Identity and Core
// search stay zero-latency fakes. It returns the registry of the catalog
// metrics (statements per operation).
func newSQLBenchService(b *testing.B) (*Service, *prometheus.Registry) {
	b.Helper()
	db := testdb.New(b)
	const cfg = `{"kb_ids":["` + benchKB + `"],"top_k":8,"min_score":0.01,"inject":"chunk","max_docs":4}`
	db.Exec(b, "INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES (?, 1, ?)", benchKB, t0)
	db.Exec(b, "INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES (?, 1, ?, ?)", routeKey, cfg, t0)
	mem := newBenchService(b) // the fakes and hits of the in-memory world
	for i := 1; i <= benchDocs; i++ {
		title, content := testkit.Document(i, benchDocLen)
		db.Exec(b, "INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, content_hash, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'ready', ?, ?)",
			i, benchKB, title, content, fmt.Sprintf("%032x", i), t0, t0)
	}
	reg := prometheus.NewRegistry()
	cat, err := catalog.Open(catalog.Options{DSN: db.ReadOnlyDSN, Metrics: catalog.NewMetrics(reg)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cat.Close() })
	svc, err := New(Options{Identity: mem.id, Retriever: mem.retriever, Catalog: cat, Keys: mem.keys, Now: mem.now,
		RateLimit: 1e9, RateBurst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	return svc, reg
}

// catalogStatements sums knowledge_sidecar_catalog_queries_total.
func catalogStatements(b *testing.B, g prometheus.Gatherer) float64 {
	b.Helper()
	return testkit.MetricSum(b, g, "knowledge_sidecar_catalog_queries_total", nil)
}

// BenchmarkServiceSQL is a whole search and a whole 32 KiB read over the SQL
// catalog on MariaDB (the fakes of BenchmarkServiceSearch for identity and
// Core): the sidecar's CPU per operation (cpu-µs/op, getrusage: the
// database's own CPU is not in it) and the catalog statements each one
// issues (statements/op), warm revision cache.
func BenchmarkServiceSQL(b *testing.B) {
	svc, reg := newSQLBenchService(b)
	ctx := context.Background()
	search := func() []byte {
		out, err := svc.Search(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(benchQuery))
		if err != nil || !bytes.Contains(out, []byte(`"hints":[{`)) {
			b.Fatalf("got %v, %s; want hints", err, out)
		}
		return out
	}
	readBody := benchReadBody(b, svc)
	read := func() {
		out, err := svc.Read(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(readBody))
		if err != nil || len(out) < protocol.ReadMaxBytes/2 {
			b.Fatalf("got %v with %d bytes; want a page", err, len(out))
		}
	}
	read()
	for _, op := range []struct {
		name string
		fn   func()
	}{{"search", func() { search() }}, {"read", read}} {
		b.Run(op.name, func(b *testing.B) {
			b.ReportAllocs()
			q0, c0 := catalogStatements(b, reg), testkit.ProcessCPU(b)
			for b.Loop() {
				op.fn()
			}
			b.ReportMetric(float64((testkit.ProcessCPU(b)-c0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric((catalogStatements(b, reg)-q0)/float64(b.N), "statements/op")
		})
	}
}
