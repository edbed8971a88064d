package knowledge

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// setRefund gives the refund document content, and the FAQ search one hit
// on it with the fragment hit.
func (e *env) setRefund(content, hit string) corefacts.Document {
	d := e.cat.docs[docRefund]
	d.Content = content
	e.cat.setDoc(d)
	e.ret.hits["faq"] = []corefacts.Hit{{KBID: "faq", DocID: docRefund, Content: hit, Score: 0.9}}
	return d
}

func (e *env) readPage(body string) (hostclient.ReadAnswer, []byte) {
	e.t.Helper()
	_, raw, ke := e.call("read", tokA, routeKey, body)
	if ke != nil {
		e.t.Fatalf("read: got %d %s (%s); want success", ke.Status, ke.Code, ke.Message)
	}
	var r hostclient.ReadAnswer
	if err := json.Unmarshal(raw, &r); err != nil {
		e.t.Fatal(err)
	}
	return r, raw
}

func TestReadResponseShape(t *testing.T) {
	e := newEnv(t)
	ref := e.refFor(tokA, routeKey, runA, docRefund)
	r, raw := e.readPage(`{"ref":"` + ref + `","run_id":"` + runA + `"}`)
	wantPrefix := `{"schema_version":"bailing.agent-knowledge-read.v1","route":"order-assistant","run_id":"` + runA +
		`","knowledge_scope_revision":"` + ScopeRevision(routeKey, &defaultKBConfg) + `","ref":"` + ref +
		`","revision":"` + corefacts.Revision("退款规则", refundContent) + `","title":"退款规则","content":`
	if !strings.HasPrefix(string(raw), wantPrefix) {
		t.Fatalf("body %s; want prefix %s", raw, wantPrefix)
	}
	wantSuffix := `,"trust":"reference_only","next_cursor":null,"truncated":false,"budget_exhausted":false,"total_content_bytes":150,"read_chain_max_bytes":131072}`
	if !strings.HasSuffix(string(raw), wantSuffix) {
		t.Fatalf("body %s; want suffix %s", raw, wantSuffix)
	}
	if r.Content != refundContent || r.TotalContentBytes != int64(len(refundContent)) {
		t.Fatalf("content %q total %d; want the whole current document (%d bytes, images kept)", r.Content, r.TotalContentBytes, len(refundContent))
	}
	r, _ = e.readPage(`{"ref":"` + e.refFor(tokA, routeKey, "", docRefund) + `"}`)
	if r.RunID != nil {
		t.Fatalf("run_id %v present without being given", *r.RunID)
	}
}

// TestReadChainThroughService pages a 300 000-character adversarial
// document through the Service with each max_bytes, checking the body
// bound, the concatenation and the 131072-byte chain budget.
func TestReadChainThroughService(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	doc := string([]rune(nastyString(r, 1_200_000))[:300_000])
	small := nastyString(r, 9000)
	for _, tc := range []struct {
		name     string
		content  string
		maxBytes string
	}{
		{"300k doc default max_bytes", doc, ""},
		{"300k doc 4096", doc, `,"max_bytes":4096`},
		{"300k doc 32768", doc, `,"max_bytes":32768`},
		{"9k doc 4096", small, `,"max_bytes":4096`},
		{"empty doc", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.setRefund(tc.content, "")
			ref := e.refFor(tokA, routeKey, "", docRefund)
			limit := protocol.ReadDefaultBytes
			if tc.maxBytes != "" {
				_ = json.Unmarshal([]byte(tc.maxBytes[len(`,"max_bytes":`):]), &limit)
			}
			var got strings.Builder
			body := `{"ref":"` + ref + `"` + tc.maxBytes + `}`
			for page := 0; ; page++ {
				e.clock.Advance(time.Second / 10) // stay under the per-session rate limit
				p, raw := e.readPage(body)
				if len(raw) > limit {
					t.Fatalf("page %d: %d bytes; want ≤ %d", page, len(raw), limit)
				}
				if !utf8.ValidString(p.Content) || p.TotalContentBytes != int64(len(tc.content)) || p.ReadChainMaxBytes != protocol.ReadChainMaxBytes {
					t.Fatalf("page %d: invalid UTF-8 or wrong totals", page)
				}
				got.WriteString(p.Content)
				if got.Len() > protocol.ReadChainMaxBytes {
					t.Fatalf("served %d bytes; want ≤ %d", got.Len(), protocol.ReadChainMaxBytes)
				}
				if p.NextCursor == nil {
					if len(tc.content) > protocol.ReadChainMaxBytes {
						if !p.Truncated || !p.BudgetExhausted {
							t.Fatalf("last page of a long doc: truncated=%v exhausted=%v; want true,true", p.Truncated, p.BudgetExhausted)
						}
					} else if p.Truncated || p.BudgetExhausted || got.String() != tc.content {
						t.Fatalf("final page: truncated=%v exhausted=%v complete=%v; want false,false,true", p.Truncated, p.BudgetExhausted, got.String() == tc.content)
					}
					break
				}
				if !p.Truncated || p.BudgetExhausted || len(*p.NextCursor) > protocol.MaxTokenBytes {
					t.Fatalf("non-final page: truncated=%v exhausted=%v; want true,false", p.Truncated, p.BudgetExhausted)
				}
				body = `{"ref":"` + ref + `","cursor":"` + *p.NextCursor + `"` + tc.maxBytes + `}`
			}
			if !strings.HasPrefix(tc.content, got.String()) {
				t.Fatalf("pages do not concatenate to the document prefix")
			}
			if len(tc.content) > protocol.ReadChainMaxBytes && got.Len() < protocol.ReadChainMaxBytes-utf8.UTFMax {
				t.Fatalf("chain stopped at %d bytes; want ≈ %d", got.Len(), protocol.ReadChainMaxBytes)
			}
		})
	}
}

// TestReadNeverServesNewerBody: a document edited mid-chain answers 409 on
// the next page, with the cursor as well as without it.
func TestReadNeverServesNewerBody(t *testing.T) {
	e := newEnv(t)
	d := e.setRefund(strings.Repeat("旧内容。", 4000), "旧内容。")
	ref := e.refFor(tokA, routeKey, "", docRefund)
	p, _ := e.readPage(`{"ref":"` + ref + `","max_bytes":4096}`)
	if p.NextCursor == nil {
		t.Fatalf("want a multi-page document")
	}
	d.Content = strings.Repeat("新内容。", 4000)
	e.cat.setDoc(d)
	for _, body := range []string{
		`{"ref":"` + ref + `","cursor":"` + *p.NextCursor + `"}`,
		`{"ref":"` + ref + `"}`,
	} {
		_, _, ke := e.call("read", tokA, routeKey, body)
		if ke == nil || ke.Code != protocol.CodeKnowledgeChanged {
			t.Fatalf("got %v; want 409 knowledge_changed", ke)
		}
	}
}

// TestReadCursorRules: a cursor continues only its own ref, and a cursor
// pointing outside the document is refused.
func TestReadCursorRules(t *testing.T) {
	e := newEnv(t)
	ref := e.refFor(tokA, routeKey, "", docRefund)
	for _, tc := range []struct {
		name   string
		offset int64
		served int64
	}{
		{"past the end", int64(len(refundContent)) + 1, 0},
		{"at the end", int64(len(refundContent)), 0},
		{"inside a character", 3, 3}, // "# 退" : byte 3 is inside 退
		{"chain already spent", 0, protocol.ReadChainMaxBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, _ := e.svc.keys.SealCursor(CursorClaims{Expiry: e.clock.Now().Add(protocol.ReferenceTTL), RefDigest: RefDigest(ref), NextOffset: tc.offset, Served: tc.served})
			_, _, ke := e.call("read", tokA, routeKey, `{"ref":"`+ref+`","cursor":"`+cur+`"}`)
			if ke == nil || ke.Code != protocol.CodeReferenceInvalid {
				t.Fatalf("got %v; want knowledge_reference_invalid", ke)
			}
		})
	}
	t.Run("valid mid-document cursor", func(t *testing.T) {
		cur := cursorOf(e, ref, 2)
		p, _ := e.readPage(`{"ref":"` + ref + `","cursor":"` + cur + `"}`)
		if p.Content != refundContent[2:] {
			t.Fatalf("content %q; want the rest from byte 2", p.Content)
		}
	})
}

func TestReadDefaultMaxBytes(t *testing.T) {
	e := newEnv(t)
	e.setRefund(strings.Repeat("x", 100000), "xxx")
	_, raw := e.readPage(`{"ref":"` + e.refFor(tokA, routeKey, "", docRefund) + `"}`)
	if len(raw) != protocol.ReadDefaultBytes {
		t.Fatalf("page of an ASCII document is %d bytes; want exactly the default %d", len(raw), protocol.ReadDefaultBytes)
	}
}

// TestAnswerInto: search and read answers are written into the caller's
// buffer when it has room for the largest answer of the endpoint, whatever
// the buffer held before, and are the answers Search and Read give; a
// smaller buffer is left alone. Refs are sealed with a fresh nonce each
// time, so they are compared by length.
func TestAnswerInto(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	refs := regexp.MustCompile(`"ref":"[^"]*"`)
	same := func(a, b []byte) bool {
		blank := func(m []byte) []byte { return []byte(strconv.Itoa(len(m))) }
		return len(a) == len(b) && bytes.Equal(refs.ReplaceAllFunc(a, blank), refs.ReplaceAllFunc(b, blank))
	}
	readBody := `{"ref":"` + e.refFor(tokA, routeKey, runA, docRefund) + `","run_id":"` + runA + `","max_bytes":4096}`
	searchBody := `{"query":"退款"}`
	_, wantRead := e.readPage(readBody)
	_, wantSearch, ke := e.call("search", tokA, routeKey, searchBody)
	if ke != nil {
		t.Fatalf("search: %d %s", ke.Status, ke.Code)
	}
	for _, tc := range []struct {
		name    string
		dst     []byte
		inPlace bool
		call    func(dst []byte) ([]byte, error)
		want    []byte
	}{
		{"read, room for max_bytes", bytes.Repeat([]byte{'x'}, 4096), true, func(dst []byte) ([]byte, error) {
			return e.svc.ReadInto(ctx, dst, tokA, testkit.RouteKey(routeKey), strings.NewReader(readBody))
		}, wantRead},
		{"read, too small", make([]byte, 100, 4095), false, func(dst []byte) ([]byte, error) {
			return e.svc.ReadInto(ctx, dst, tokA, testkit.RouteKey(routeKey), strings.NewReader(readBody))
		}, wantRead},
		{"search, room for the largest answer", bytes.Repeat([]byte{'x'}, protocol.SearchMaxBytes), true, func(dst []byte) ([]byte, error) {
			return e.svc.SearchInto(ctx, dst, tokA, testkit.RouteKey(routeKey), strings.NewReader(searchBody))
		}, wantSearch},
		{"search, too small", make([]byte, 10, protocol.SearchMaxBytes-1), false, func(dst []byte) ([]byte, error) {
			return e.svc.SearchInto(ctx, dst, tokA, testkit.RouteKey(routeKey), strings.NewReader(searchBody))
		}, wantSearch},
	} {
		got, err := tc.call(tc.dst)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !same(got, tc.want) {
			t.Errorf("%s: answer %s; want %s", tc.name, got, tc.want)
		}
		if inPlace := &got[0] == &tc.dst[:1][0]; inPlace != tc.inPlace {
			t.Errorf("%s: written into the buffer: %v; want %v", tc.name, inPlace, tc.inPlace)
		}
	}
}
