package knowledge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

const (
	maxRetrievalTopK = 20
	// SummaryMaxBytes bounds a hint summary before the body budget is
	// applied: an extractive excerpt of at most this many UTF-8 bytes.
	SummaryMaxBytes = 600
	// summarySeparator joins excerpts of several hit chunks of one document.
	summarySeparator = " … "
)

// Search answers POST …/knowledge/search (SPEC §4).
func (s *Service) Search(ctx context.Context, authorization string, route corefacts.RouteKey, body io.Reader) ([]byte, error) {
	return s.SearchInto(ctx, nil, authorization, route, body)
}

// SearchInto is Search with the answer written into dst's memory when it
// has room for protocol.SearchMaxBytes (see ReadInto).
func (s *Service) SearchInto(ctx context.Context, dst []byte, authorization string, route corefacts.RouteKey, body io.Reader) ([]byte, error) {
	return answer(ctx, s, EndpointSearch, call{authorization: authorization, route: route, dst: dst}, body, searchBody, (*Service).search)
}

// search is SearchInto after identity and body (SPEC §2 order: … → managed
// task → route → run).
func (s *Service) search(ctx context.Context, c *call, req searchRequest) ([]byte, error) {
	c.d.asked(req.query, true, req.runID)
	// The route's KB rows are read with it (one statement) when the last
	// configuration seen for the route names them; the fresh route decides
	// (kbRows reads any id the guess missed).
	var pf prefetch
	if last, ok := s.routes.Peek(c.route); ok && last.Knowledge != nil {
		pf.kbIDs = uniqueStrings(last.Knowledge.KBIDs)
	}
	a, runChecked, err := s.admitTask(ctx, c.authorization, c.route, c.sess, req.runID, pf)
	if err != nil {
		return nil, err
	}
	if req.runID != "" && !runChecked {
		if err := s.checkRun(ctx, req.runID, a); err != nil {
			return nil, err
		}
	}
	res := SearchBody{
		Route: a.route.Key, RunID: req.runID,
		ScopeRevision: ScopeRevision(a.route.Key, a.route.Knowledge),
		Status:        protocol.StatusDisabled,
	}
	kc := a.route.Knowledge
	if kc == nil {
		c.d.hints(res.Status, nil)
		return res.appendTo(c.dst), nil
	}
	kbs := uniqueStrings(kc.KBIDs)
	rows, err := s.kbRows(ctx, a, kbs)
	if err != nil {
		return nil, classifyCore(err, nil)
	}
	flags := make(map[string]bool, len(rows))
	var searchable []string
	for _, id := range kbs {
		if flags[id] = rows[id].Enabled; flags[id] {
			searchable = append(searchable, id)
		} else {
			s.m.kbCall("skipped")
		}
	}
	answers := s.retrieve(ctx, searchable, rows, req.query, retrievalTopK(kc.TopK, req.limit))
	if err := s.failSilent(ctx, answers); err != nil {
		return nil, err
	}
	// The route's threshold, applied here exactly as Core would have (the
	// answers are unfiltered), before any catalog work on hits.
	threshold := corefacts.ScoreThreshold(kc.MinScore)
	for i := range answers {
		answers[i].hits = aboveThreshold(answers[i].hits, threshold)
	}
	answered := 0
	for _, ans := range answers {
		if ans.err == nil {
			answered++
		}
	}
	switch {
	case answered == len(kbs):
		res.Status = protocol.StatusOK
	case answered == 0:
		res.Status = protocol.StatusUnavailable
	default:
		res.Status = protocol.StatusPartial
	}
	groups, err := s.rank(ctx, answers, flags, searchable, req.limit, 2*req.limit)
	if err != nil {
		return nil, err
	}
	if res.Hints, err = s.mint(groups, s.binding(a, req.runID), res.ScopeRevision); err != nil {
		return nil, errUnavailable(err)
	}
	before := len(res.Hints)
	res.Fit(protocol.SearchMaxBytes)
	s.m.drop("budget", before-len(res.Hints))
	if res.Truncated {
		s.m.truncate("search")
	}
	c.d.hints(res.Status, res.Hints)
	return res.appendTo(c.dst), nil
}

// retrievalTopK is k = max(route top_k, 4 × limit) capped at 20.
func retrievalTopK(topK, limit int) int {
	return min(max(topK, 4*limit), maxRetrievalTopK)
}

type kbAnswer struct {
	kb   string
	hits []corefacts.Hit
	err  error
}

// kbEmptyFailure is the search_kb_calls_total result of a KB that answered
// no hit at all although it holds a ready document.
const kbEmptyFailure = "empty_failure"

// errSilentFailure: Core answered 200 without any hit for a KB that holds a
// ready document. Unfiltered, a healthy KB always returns some hit, so Core
// swallowed a failure (an embeddings outage, an unusable embedding
// credential; CORE_FACTS §5.2): the KB counts as failed, never as "nothing
// above the threshold" (SPEC §4).
var errSilentFailure = errors.New("knowledge base answered no hit although it holds a ready document")

// failSilent marks as failed the answers with no hit at all whose KB holds
// a ready document, and counts every answered call (ok or empty_failure).
// The catalog is asked once, and only when some KB answered no hit; its
// failure is the search's (503), since the answer cannot be told apart.
func (s *Service) failSilent(ctx context.Context, answers []kbAnswer) error {
	var empty []string
	for _, ans := range answers {
		switch {
		case ans.err != nil:
		case len(ans.hits) == 0:
			empty = append(empty, ans.kb)
		default:
			s.m.kbCall("ok")
		}
	}
	if len(empty) == 0 {
		return nil
	}
	ready, err := s.catalog.ReadyKBs(ctx, empty)
	if err != nil {
		return classifyCore(err, nil)
	}
	for i := range answers {
		ans := &answers[i]
		if ans.err != nil || len(ans.hits) > 0 {
			continue
		}
		if !ready[ans.kb] {
			s.m.kbCall("ok") // nothing to find: an empty or not yet embedded KB
			continue
		}
		ans.err = errSilentFailure
		s.m.kbCall(kbEmptyFailure)
		s.log.LogAttrs(ctx, slog.LevelWarn, "knowledge base search failed",
			slog.String("kb_id", ans.kb), slog.String("error_class", kbEmptyFailure))
	}
	return nil
}

// aboveThreshold keeps the hits Core's own filter would have kept for the
// threshold (corefacts.KeepsScore), in order, in hits' own array (a
// Retriever's answer belongs to the caller).
func aboveThreshold(hits []corefacts.Hit, threshold float64) []corefacts.Hit {
	out := hits[:0]
	for _, h := range hits {
		if corefacts.KeepsScore(h.Score, threshold) {
			out = append(out, h)
		}
	}
	return out
}

// retrieve runs one Core search per KB concurrently, each with its own
// timeout. Core is called with the KB id as stored (rows[kb].ID): it matches
// ids case-insensitively, but its index cache is keyed by the spelling sent
// and a write refreshes only the stored spelling's entry, so another
// spelling can return chunks up to 10 minutes old. Hits come back under the
// route's spelling kb. Answers are Core's unfiltered top topK; the calls
// that failed are counted here, the answered ones by failSilent.
func (s *Service) retrieve(ctx context.Context, kbs []string, rows map[string]corefacts.KB, query string, topK int) []kbAnswer {
	answers := make([]kbAnswer, len(kbs))
	var wg sync.WaitGroup
	for i, kb := range kbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			stored := rows[kb].ID
			if stored == "" {
				stored = kb
			}
			hits, err := s.retriever.SearchKB(cctx, stored, query, topK)
			for j := range hits {
				if corefacts.SameID(hits[j].KBID, stored) {
					hits[j].KBID = kb
				}
			}
			answers[i] = kbAnswer{kb: kb, hits: hits, err: err}
			switch {
			case err == nil:
			case errors.Is(err, context.DeadlineExceeded):
				s.m.kbCall("timeout")
			case errors.Is(err, corefacts.ErrRateLimited):
				s.m.kbCall("rate_limited")
			default:
				s.m.kbCall("error")
			}
			if err != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "knowledge base search failed",
					slog.String("kb_id", kb), slog.String("error_class", errorClass(err)))
			}
		}()
	}
	wg.Wait()
	return answers
}

type docGroup struct {
	doc    corefacts.Document
	score  float64
	chunks []string // current hit chunk texts, best first
}

// rank merges hits by score, keeps each document's best surviving rank,
// re-checks every hit against the current document and returns at most
// limit documents. Bodies are fetched from the catalog batch documents at
// a time (batch ≤ 0: all candidates in one query). A hit without a KB id
// (a turn's knowledge_refs, which carry none) takes its document's KB, as
// fenced by the catalog; it must still be enabled (flags). Thresholds are
// the caller's (Search filters before calling; a turn's items are what Core
// already kept).
func (s *Service) rank(ctx context.Context, answers []kbAnswer, flags map[string]bool, fence []string, limit, batch int) ([]docGroup, error) {
	var hits []corefacts.Hit
	for _, ans := range answers {
		if ans.err != nil {
			continue
		}
		for _, h := range ans.hits {
			if h.KBID == "" {
				h.KBID = ans.kb
			}
			if h.KBID != ans.kb || h.DocID <= 0 || math.IsNaN(h.Score) || math.IsInf(h.Score, 0) {
				continue
			}
			hits = append(hits, h)
		}
	}
	if len(hits) == 0 {
		return nil, nil
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	var ids []int64
	seen := map[int64]bool{}
	for _, h := range hits {
		if !seen[h.DocID] {
			seen[h.DocID] = true
			ids = append(ids, h.DocID)
		}
	}
	// Bodies are fetched lazily, in rank order and in small batches, until
	// limit documents survive: a search reads a few bodies, not every
	// candidate of every knowledge base.
	docs := make(map[int64]corefacts.Document, len(ids))
	fetched := make(map[int64]bool, len(ids))
	next := 0
	if batch <= 0 {
		batch = len(ids)
	}
	var groups []docGroup
	index := map[int64]int{}
	texts := map[int64]*docMatch{}
	for _, h := range hits {
		gi, grouped := index[h.DocID]
		if !grouped && len(groups) >= limit {
			continue
		}
		for !fetched[h.DocID] {
			part := ids[next:min(next+batch, len(ids))]
			next += len(part)
			got, err := s.catalog.Documents(ctx, part, fence)
			if err != nil {
				return nil, classifyCore(err, nil)
			}
			for _, id := range part {
				fetched[id] = true
				if d, ok := got[id]; ok {
					docs[id] = d
				}
			}
		}
		doc, ok := docs[h.DocID]
		switch {
		case !ok:
			s.m.drop("missing", 1)
			continue
		case doc.Status != corefacts.StatusReady:
			s.m.drop("not_ready", 1)
			continue
		case h.KBID != "" && doc.KBID != h.KBID || !flags[doc.KBID]:
			s.m.drop("kb_unavailable", 1)
			continue
		}
		found, known := s.rechecks.lookup(doc.Revision, h.Content)
		if !known { // scan the document, once per request
			text, ok := texts[h.DocID]
			if !ok {
				text = newDocMatch(doc.Content)
				texts[h.DocID] = text
			}
			found = text.containsHit(h.Content)
			s.rechecks.store(doc.Revision, h.Content, found)
		}
		if !found {
			s.m.drop("stale_fragment", 1)
			continue
		}
		if grouped {
			groups[gi].chunks = append(groups[gi].chunks, h.Content)
			continue
		}
		index[h.DocID] = len(groups)
		groups = append(groups, docGroup{doc: doc, score: h.Score, chunks: []string{h.Content}})
	}
	return groups, nil
}

// mint turns ranked documents into hints: an extractive summary, the
// document's revision, and a ref bound to bind and scope that expires
// protocol.ReferenceTTL from now.
func (s *Service) mint(groups []docGroup, bind Binding, scope string) ([]Hint, error) {
	expiry := s.now().Add(protocol.ReferenceTTL).Truncate(time.Second)
	digest := bind.Digest()
	hints := make([]Hint, 0, len(groups))
	for _, g := range groups {
		rev := docRevision(g.doc)
		ref, err := s.keys.SealRef(RefClaims{
			Expiry: expiry, Binding: digest, ScopeRevision: scope,
			DocRevision: rev, DocID: g.doc.DocID, KBID: g.doc.KBID,
		})
		if err != nil {
			return nil, err
		}
		hints = append(hints, Hint{
			Ref: ref, Title: g.doc.Title, Summary: summarize(g.chunks), Revision: rev,
			Score: g.score, ExpiresAt: expiry, docID: g.doc.DocID, kbID: g.doc.KBID,
		})
	}
	return hints, nil
}

// summarize is the bounded extractive excerpt of a document's hit chunks:
// each chunk without the U+FFFD halves of a character Core cut in two at its
// edges (cutHalves), whitespace-collapsed, joined by " … ", cut on a
// character boundary at SummaryMaxBytes.
func summarize(chunks []string) string {
	var b strings.Builder
	for _, c := range chunks {
		c, _, _ = cutHalves(c)
		c = collapseSpace(c, SummaryMaxBytes-b.Len())
		if c == "" {
			continue
		}
		if b.Len() > 0 {
			if b.Len()+len(summarySeparator) >= SummaryMaxBytes {
				break
			}
			b.WriteString(summarySeparator)
		}
		b.WriteString(c)
		if b.Len() >= SummaryMaxBytes {
			break
		}
	}
	return cutBytes(b.String(), SummaryMaxBytes)
}

// docRevision is the catalog's revision when well-formed, else computed.
func docRevision(d corefacts.Document) string {
	if _, err := decodeRevision(d.Revision); err == nil {
		return d.Revision
	}
	return corefacts.Revision(d.Title, d.Content)
}

func uniqueStrings(in []string) []string {
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// errorClasses names, in order, the classes errorClass tells apart: the
// first whose error err wraps wins.
var errorClasses = []struct {
	err   error
	class string
}{
	{corefacts.ErrBreakerOpen, "breaker_open"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
	{corefacts.ErrUnavailable, "unavailable"},
	{corefacts.ErrRequestRefused, "refused"},
	{corefacts.ErrUnauthorized, "unauthorized"},
	{corefacts.ErrRateLimited, "rate_limited"},
}

// errorClass names an error's class for logs without its text ("other"
// when none of errorClasses matches).
func errorClass(err error) string {
	for _, c := range errorClasses {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return "other"
}
