package knowledge

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Read answers POST …/knowledge/read (SPEC §6). Every page re-checks
// identity, route, run, scope revision, KB state and the document's
// revision; a changed document is 409 knowledge_changed, never a newer body
// under an old reference.
func (s *Service) Read(ctx context.Context, authorization string, route corefacts.RouteKey, body io.Reader) ([]byte, error) {
	return s.ReadInto(ctx, nil, authorization, route, body)
}

// ReadInto is Read with the answer written into dst's memory when it has
// room for the page asked (max_bytes), so that a caller that writes the
// answer out and reuses its buffer does not allocate a page per read. The
// answer is never retained by the service.
func (s *Service) ReadInto(ctx context.Context, dst []byte, authorization string, route corefacts.RouteKey, body io.Reader) (out []byte, err error) {
	start := time.Now()
	defer func() { s.m.observe("read", err, time.Since(start).Seconds()) }()
	d := s.auditing(EndpointRead, route) // nil: audit off
	if d != nil {
		defer func() { out, err = s.disclose(ctx, d, out, err) }()
	}

	// SPEC §2 order: identity → body → managed task → route → MAC → …
	sess, err := s.identify(ctx, authorization)
	if err != nil {
		return nil, err
	}
	d.identified(sess)
	raw, err := readBody(body)
	if err != nil {
		return nil, err
	}
	req, err := parseRead(raw)
	if err != nil {
		return nil, err
	}
	d.asked("", false, req.runID)
	// A marked session's read without run_id is TASK_REQUIRED even though its
	// ref names a run; with run_id the ref must be bound to it (below).
	// The ref is opened first (no I/O) so that its KB and document are read
	// with the route in one statement; its verdict is still given after
	// the route's (SPEC §2 order).
	rc, refErr := s.keys.OpenRef(req.ref)
	var pf prefetch
	if refErr == nil {
		pf = prefetch{kbIDs: []string{rc.KBID}, docID: rc.DocID}
	}
	a, runChecked, err := s.admitTask(ctx, authorization, route, sess, req.runID, pf)
	if err != nil {
		return nil, err
	}
	// Authenticity (the AEAD tag) of the ref, then of the cursor.
	if refErr != nil {
		return nil, errRefInvalid(refErr)
	}
	var cc CursorClaims
	if req.hasCursor {
		if cc, err = s.keys.OpenCursor(req.cursor); err != nil {
			return nil, errRefInvalid(err)
		}
	}
	// Expiry.
	now := s.now()
	if expired(rc.Expiry, now) || req.hasCursor && expired(cc.Expiry, now) {
		return nil, errRefExpired()
	}
	// Binding.
	if rc.Binding != s.binding(a, req.runID).Digest() {
		return nil, errRefInvalid(errors.New("reference bound to another identity, route or run"))
	}
	if req.hasCursor && cc.RefDigest != RefDigest(req.ref) {
		return nil, errRefInvalid(errors.New("cursor continues another reference"))
	}
	// Run.
	if req.runID != "" && !runChecked {
		if err := s.checkRun(ctx, req.runID, a); err != nil {
			return nil, err
		}
	}
	// Scope.
	scope := ScopeRevision(a.route.Key, a.route.Knowledge)
	if scope != rc.ScopeRevision || a.route.Knowledge == nil {
		return nil, errScopeChanged()
	}
	// Document.
	if !slices.Contains(a.route.Knowledge.KBIDs, rc.KBID) {
		return nil, errKnowledgeChanged(errors.New("knowledge base not in route"))
	}
	fence := []string{rc.KBID}
	kbs, err := s.kbRows(ctx, a, fence)
	if err != nil {
		return nil, classifyCore(err, nil)
	}
	if !kbs[rc.KBID].Enabled {
		return nil, errKnowledgeChanged(errors.New("knowledge base disabled or removed"))
	}
	doc, err := s.document(ctx, a, rc.DocID, fence)
	if err != nil {
		return nil, classifyCore(err, errKnowledgeChanged(nil))
	}
	if doc.Status != corefacts.StatusReady || doc.KBID != rc.KBID || doc.DocID != rc.DocID || docRevision(doc) != rc.DocRevision {
		return nil, errKnowledgeChanged(errors.New("document not ready or revised"))
	}
	page := ReadPage{
		Route: a.route.Key, RunID: req.runID, ScopeRevision: scope, Ref: req.ref,
		Revision: rc.DocRevision, Title: doc.Title, Content: doc.Content,
	}
	if req.hasCursor {
		off, served := cc.NextOffset, cc.Served
		if off >= int64(len(doc.Content)) || served >= protocol.ReadChainMaxBytes ||
			boundaryAtOrBefore(doc.Content, int(off)) != int(off) {
			return nil, errRefInvalid(errors.New("cursor position does not fit the document"))
		}
		page.Offset, page.Served = int(off), int(served)
	}
	plan, ok := page.Plan(req.maxBytes, s.keys.cursorLen())
	if !ok {
		return nil, errInvalid("max_bytes is too small for this document; use a larger value.")
	}
	var cursor string
	n := plan.End - page.Offset
	if plan.More {
		cursor, err = s.keys.SealCursor(CursorClaims{
			Expiry:     now.Add(protocol.ReferenceTTL).Truncate(time.Second),
			RefDigest:  RefDigest(req.ref),
			NextOffset: int64(plan.End),
			Served:     int64(page.Served + n),
		})
		if err != nil {
			return nil, errUnavailable(err)
		}
	}
	if cap(dst) < req.maxBytes {
		dst = make([]byte, 0, req.maxBytes)
	}
	out = page.AppendJSON(dst[:0], plan, cursor)
	s.m.served(n)
	if plan.Truncated() {
		s.m.truncate("read")
	}
	if d != nil {
		d.Status = protocol.StatusOK
		d.Documents = []DisclosedDocument{{
			DocID: rc.DocID, KBID: rc.KBID, Revision: rc.DocRevision,
			Page: true, Start: page.Offset, End: plan.End, BudgetExhausted: plan.BudgetExhausted,
		}}
	}
	return out, nil
}

// expired reports whether a reference or cursor with this expiry is older
// than its lifetime at now (valid through the expiry second itself).
func expired(expiry, now time.Time) bool { return now.Unix() > expiry.Unix() }
