package fakecore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// kb is one knowledge base: its documents (the database) and its index (the
// chunks /kb/search sees, which may lag behind the documents).
//
// Core matches KB ids case-insensitively but keys its index cache by the
// spelling a search sends, and a write refreshes only the stored spelling's
// entry (CORE_FACTS Addendum 2): a search by another spelling gets a
// snapshot of the index taken at its first search, kept until Reindex.
type kb struct {
	enabled bool
	// embedDown: this KB's embedding call fails (SetEmbeddingsOutage).
	embedDown bool
	docs      map[int64]doc
	index     []chunk
	aliases   map[string][]chunk // by spelling sent, other than the stored one
}

type doc struct {
	title, content string
}

type chunk struct {
	docID int64
	seq   int
	title string
	text  string
}

// AddKB creates an empty, enabled knowledge base (AddDoc creates it too).
func (c *Core) AddKB(kbID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kbLocked(kbID)
}

func (c *Core) kbLocked(kbID string) *kb {
	_, k := c.findKBLocked(kbID)
	if k == nil {
		k = &kb{enabled: true, docs: map[int64]doc{}}
		c.kbs[kbID] = k
	}
	return k
}

// findKBLocked finds a KB the way Core's id lookup does: case-insensitively.
// stored is the id it was created with. Caller holds mu.
func (c *Core) findKBLocked(id string) (stored string, k *kb) {
	if k := c.kbs[id]; k != nil {
		return id, k
	}
	for s, k := range c.kbs {
		if strings.EqualFold(s, id) {
			return s, k
		}
	}
	return "", nil
}

// AddDoc stores a document and indexes its chunks (Chunks(content)).
// It replaces a document with the same id, like UpdateDoc without staleness.
func (c *Core) AddDoc(kbID string, docID int64, title, content string) {
	c.UpdateDoc(kbID, docID, title, content, false)
}

// UpdateDoc changes a document. With keepStale the index keeps the old
// chunk text (Core's cached index, or a failed re-embedding) under the new
// title, until Reindex.
func (c *Core) UpdateDoc(kbID string, docID int64, title, content string, keepStale bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.kbLocked(kbID)
	k.docs[docID] = doc{title: title, content: content}
	if keepStale {
		for i := range k.index {
			if k.index[i].docID == docID {
				k.index[i].title = title
			}
		}
		return
	}
	k.reindexDoc(docID)
}

// RemoveDoc deletes a document. With keepStale its chunks stay searchable
// until Reindex.
func (c *Core) RemoveDoc(kbID string, docID int64, keepStale bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, k := c.findKBLocked(kbID)
	if k == nil {
		return
	}
	delete(k.docs, docID)
	if !keepStale {
		k.reindexDoc(docID)
	}
}

// Reindex rebuilds every index from the current documents (the cache expired).
func (c *Core) Reindex() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.kbs {
		k.index, k.aliases = nil, nil
		ids := make([]int64, 0, len(k.docs))
		for id := range k.docs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			k.reindexDoc(id)
		}
	}
}

// reindexDoc replaces docID's chunks with those of its current body.
func (k *kb) reindexDoc(docID int64) {
	k.index = slices.DeleteFunc(k.index, func(ch chunk) bool { return ch.docID == docID })
	d, ok := k.docs[docID]
	if !ok {
		return
	}
	for i, text := range Chunks(d.content) {
		k.index = append(k.index, chunk{docID: docID, seq: i, title: d.title, text: text})
	}
}

// DisableKB keeps the KB listed but makes /kb/search silently return no hits
// for it (Core swallows the per-KB error).
func (c *Core) DisableKB(kbID string) { c.setKBEnabled(kbID, false) }

// EnableKB re-enables a disabled KB.
func (c *Core) EnableKB(kbID string) { c.setKBEnabled(kbID, true) }

func (c *Core) setKBEnabled(kbID string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kbLocked(kbID).enabled = on
}

// SetEmbeddingsOutage simulates an embeddings outage: the provider down, or
// a KB's embedding credential unusable. Core's per-KB search() then throws
// inside searchMulti, which swallows it, so /kb/search answers 200 with the
// KB still listed in kb_ids and no hit from it (CORE_FACTS §5.2, Addendum 2).
// With kbIDs it applies to those KBs (each has its own credential); without,
// to every KB, present and future. SetEmbeddingsOutage(false) with no ids
// ends every outage. Turns lose the inline knowledge items of the documents
// of failing KBs too (Core's turn retrieval is the same searchMulti).
func (c *Core) SetEmbeddingsOutage(down bool, kbIDs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(kbIDs) == 0 {
		c.embedOutage = down
		if !down {
			for _, k := range c.kbs {
				k.embedDown = false
			}
		}
		return
	}
	for _, id := range kbIDs {
		c.kbLocked(id).embedDown = down
	}
}

// embeddingsDownForLocked: a turn's knowledge item of docID would not be
// retrieved, its KB's embedding call failing (every KB's, when the outage is
// global). Caller holds mu.
func (c *Core) embeddingsDownForLocked(docID int64) bool {
	if c.embedOutage {
		return true
	}
	for _, k := range c.kbs {
		if _, ok := k.docs[docID]; ok && k.embedDown {
			return true
		}
	}
	return false
}

// DeleteKB removes a KB: /kb/search then drops its id (400 知识库不可用 when
// no requested KB is left).
func (c *Core) DeleteKB(kbID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stored, _ := c.findKBLocked(kbID); stored != "" {
		delete(c.kbs, stored)
	}
}

// kbSearchBodyMax is Core's default JSON body limit (BAILING_JSON_BODY_MAX_BYTES).
const kbSearchBodyMax = 1 << 20

type kbHit struct {
	Score   float64 `json:"score"`
	Content string  `json:"content"`
	DocID   int64   `json:"doc_id"`
	Title   string  `json:"title"`
	Seq     int     `json:"seq"`
	KBID    string  `json:"kb_id"`
}

type kbSearchResponse struct {
	KBIDs []string `json:"kb_ids"`
	Hits  []kbHit  `json:"hits"`
}

// KBSearchAnswer is the body of Core's 200 answer to POST /kb/search with
// these KB ids and hits, byte for byte as serveKBSearch writes it: for tests
// and benchmarks that need Core's wire bytes without a server.
func KBSearchAnswer(kbIDs []string, hits []corefacts.Hit) []byte {
	r := kbSearchResponse{KBIDs: kbIDs, Hits: make([]kbHit, 0, len(hits))}
	for _, h := range hits {
		r.Hits = append(r.Hits, kbHit{Score: h.Score, Content: h.Content, DocID: h.DocID, Title: h.Title, Seq: h.Seq, KBID: h.KBID})
	}
	return encodeJSON(r)
}

// serveKBSearch is POST /kb/search (CORE_FACTS §5.2, §5.6).
func (c *Core) serveKBSearch(w http.ResponseWriter, r *http.Request, body []byte, tooLarge bool) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusNotFound, errBody{Error: "not found"})
		return
	}
	if !c.serviceAuthorized(r) {
		writeJSON(w, http.StatusUnauthorized, errBody{Error: "unauthorized"})
		return
	}
	if limit, over := c.rateLimited(); over {
		writeJSON(w, http.StatusTooManyRequests, errBody{Error: fmt.Sprintf("超出限速（%d/分钟）", limit)})
		return
	}
	if tooLarge || len(body) > kbSearchBodyMax {
		writeJSON(w, http.StatusRequestEntityTooLarge, struct {
			Error    string `json:"error"`
			MaxBytes int    `json:"max_bytes"`
		}{"payload too large", kbSearchBodyMax})
		return
	}
	var b map[string]json.RawMessage
	trimmed := jsonTrim(body)
	if len(trimmed) == 0 || !json.Valid(trimmed) || bytes.Equal(trimmed, []byte("null")) {
		writeInternalError(w, http.StatusInternalServerError) // readBody is not wrapped: a parse error escapes as 500
		return
	}
	if trimmed[0] == '{' {
		_ = json.Unmarshal(trimmed, &b)
	}
	ids := kbIDs(b)
	var query string
	if raw, ok := b["query"]; ok {
		_ = json.Unmarshal(raw, &query)
	}
	query = JSTrim(query)
	if len(ids) == 0 || query == "" {
		writeJSON(w, http.StatusBadRequest, errBody{Error: "kb_id（或 kb_ids）/ query 必填"})
		return
	}
	query = cutUTF16(query, 2000)
	topK := jsNumberOr(b["top_k"], 5)
	minScore := jsNumberOr(b["min_score"], 0.35)
	k := int(math.Min(math.Max(topK, 1), 20))

	c.mu.Lock()
	defer c.mu.Unlock()
	var existing []string // echoed as sent
	for _, id := range ids {
		if _, k := c.findKBLocked(id); k != nil && !slices.Contains(existing, id) {
			existing = append(existing, id)
		}
	}
	if len(existing) == 0 {
		writeJSON(w, http.StatusBadRequest, errBody{Error: "知识库不可用：" + strings.Join(ids, ",")})
		return
	}
	hits := []kbHit{}
	for _, id := range existing {
		stored, kb := c.findKBLocked(id)
		if c.embedOutage || kb.embedDown {
			continue // the embedding call failed; searchMulti skips the KB
		}
		hits = append(hits, kb.search(id, kb.indexFor(id, stored), query, k, minScore)...)
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	if len(hits) > k {
		hits = hits[:k]
	}
	writeJSON(w, http.StatusOK, kbSearchResponse{KBIDs: existing, Hits: hits})
}

// indexFor is the index a search sending spelling sees: the live one for
// the stored spelling, else that spelling's snapshot (taken now if it is the
// first search by it).
func (k *kb) indexFor(spelling, stored string) []chunk {
	if spelling == stored {
		return k.index
	}
	snap, ok := k.aliases[spelling]
	if !ok {
		if k.aliases == nil {
			k.aliases = map[string][]chunk{}
		}
		snap = slices.Clone(k.index)
		k.aliases[spelling] = snap
	}
	return snap
}

// search is one KB's part of searchMulti over index: top k by score, then
// the min_score filter (score ≥ min_score: a negative min_score keeps every
// hit of the top k, whatever its score). A disabled KB fails, which Core
// swallows: no hits.
// Hits carry kbID as sent.
func (k *kb) search(kbID string, index []chunk, query string, topK int, minScore float64) []kbHit {
	if !k.enabled {
		return nil
	}
	hits := make([]kbHit, 0, len(index))
	for _, ch := range index {
		hits = append(hits, kbHit{Score: Score(query, ch.text), Content: ch.text, DocID: ch.docID, Title: ch.title, Seq: ch.seq, KBID: kbID})
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		if hits[i].DocID != hits[j].DocID {
			return hits[i].DocID < hits[j].DocID
		}
		return hits[i].Seq < hits[j].Seq
	})
	if len(hits) > topK {
		hits = hits[:topK]
	}
	out := hits[:0]
	for _, h := range hits {
		if h.Score >= minScore {
			out = append(out, h)
		}
	}
	return out
}

// serviceAuthorized accepts only the service token, as a bearer or ?token=.
// Agent (bha_) tokens are not accepted by Core's legacy authenticator.
func (c *Core) serviceAuthorized(r *http.Request) bool {
	if c.opts.ServiceToken == "" {
		return false
	}
	tok := ""
	if m := bearerPattern.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		tok = m[1]
	} else {
		tok = r.URL.Query().Get("token")
	}
	return tok == c.opts.ServiceToken
}

// kbIDs applies "kb_ids wins over kb_id": a non-empty kb_ids array, else kb_id.
func kbIDs(b map[string]json.RawMessage) []string {
	var arr []any
	if raw, ok := b["kb_ids"]; ok && json.Unmarshal(raw, &arr) == nil && len(arr) > 0 {
		var ids []string
		for _, v := range arr {
			if s, ok := v.(string); ok && JSTrim(s) != "" {
				ids = append(ids, JSTrim(s))
			}
		}
		return ids
	}
	var one string
	if raw, ok := b["kb_id"]; ok && json.Unmarshal(raw, &one) == nil && JSTrim(one) != "" {
		return []string{JSTrim(one)}
	}
	return nil
}

// jsNumberOr is `Number(x ?? def) || def` in JavaScript.
func jsNumberOr(raw json.RawMessage, def float64) float64 {
	raw = jsonTrim(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return def
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return def
	}
	n := math.NaN()
	switch x := v.(type) {
	case float64:
		n = x
	case bool:
		if x {
			n = 1
		} else {
			n = 0
		}
	case string:
		s := JSTrim(x) // Number(string): StrWhiteSpaceChar is WhiteSpace and LineTerminator
		if s == "" {
			n = 0
		} else if f, err := strconv.ParseFloat(s, 64); err == nil {
			n = f
		}
	}
	if n == 0 || math.IsNaN(n) {
		return def
	}
	return n
}

// rateLimited counts one /kb/search call against Options.RateLimitPerMin,
// the bucket of the service credential's client (Core's
// bz_clients.rate_limit_per_min, 60 by default, 0 unlimited). over reports
// that the call is past the limit (Core answers 429).
func (c *Core) rateLimited() (limit int, over bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit = c.opts.RateLimitPerMin
	if limit <= 0 {
		return limit, false
	}
	now := c.opts.Now()
	if c.rateWindow.IsZero() || !now.Before(c.rateWindow.Add(time.Minute)) {
		c.rateWindow, c.rateCount = now, 0
	}
	c.rateCount++
	return limit, c.rateCount > limit
}

// SetRateLimit changes Options.RateLimitPerMin (0: unlimited) and starts a
// new window.
func (c *Core) SetRateLimit(perMin int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.RateLimitPerMin = perMin
	c.rateWindow, c.rateCount = time.Time{}, 0
}
