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
func (s *Service) ReadInto(ctx context.Context, dst []byte, authorization string, route corefacts.RouteKey, body io.Reader) ([]byte, error) {
	return answer(ctx, s, EndpointRead, call{authorization: authorization, route: route, dst: dst}, body, readBody, (*Service).read)
}

// read is ReadInto after identity and body (SPEC §2 order: … → managed
// task → route → MAC → expiry → binding → run → scope → document).
func (s *Service) read(ctx context.Context, c *call, req readRequest) ([]byte, error) {
	c.d.asked("", false, req.runID)
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
	a, runChecked, err := s.admitTask(ctx, c.authorization, c.route, c.sess, req.runID, pf)
	if err != nil {
		return nil, err
	}
	if refErr != nil {
		return nil, errRefInvalid(refErr)
	}
	cc, now, err := s.checkReadClaims(req, rc, a)
	if err != nil {
		return nil, err
	}
	if req.runID != "" && !runChecked {
		if err := s.checkRun(ctx, req.runID, a); err != nil {
			return nil, err
		}
	}
	page, err := s.readDocument(ctx, a, req, rc)
	if err != nil {
		return nil, err
	}
	if req.hasCursor {
		off, served := cc.NextOffset, cc.Served
		if off >= int64(len(page.Content)) || served >= protocol.ReadChainMaxBytes ||
			boundaryAtOrBefore(page.Content, int(off)) != int(off) {
			return nil, errRefInvalid(errors.New("cursor position does not fit the document"))
		}
		page.Offset, page.Served = int(off), int(served)
	}
	return s.writePage(c.dst, c.d, req, rc, page, now)
}

// checkReadClaims checks a read's opened ref against its cursor and the
// admitted identity, in SPEC §2 order: the cursor's authenticity (the AEAD
// tag; the ref's was checked when opened), expiry, binding. It returns the
// cursor's claims (zero without a cursor) and the time the expiry was
// checked at.
func (s *Service) checkReadClaims(req readRequest, rc RefClaims, a admitted) (cc CursorClaims, now time.Time, err error) {
	if req.hasCursor {
		if cc, err = s.keys.OpenCursor(req.cursor); err != nil {
			return cc, now, errRefInvalid(err)
		}
	}
	now = s.now()
	if expired(rc.Expiry, now) || req.hasCursor && expired(cc.Expiry, now) {
		return cc, now, errRefExpired()
	}
	if rc.Binding != s.binding(a, req.runID).Digest() {
		return cc, now, errRefInvalid(errors.New("reference bound to another identity, route or run"))
	}
	if req.hasCursor && cc.RefDigest != RefDigest(req.ref) {
		return cc, now, errRefInvalid(errors.New("cursor continues another reference"))
	}
	return cc, now, nil
}

// readDocument checks the ref's scope revision, knowledge base and
// document revision against the route and the catalog now, and returns the
// page to serve from (at offset 0).
func (s *Service) readDocument(ctx context.Context, a admitted, req readRequest, rc RefClaims) (ReadPage, error) {
	scope := ScopeRevision(a.route.Key, a.route.Knowledge)
	if scope != rc.ScopeRevision || a.route.Knowledge == nil {
		return ReadPage{}, errScopeChanged()
	}
	if !slices.Contains(a.route.Knowledge.KBIDs, rc.KBID) {
		return ReadPage{}, errKnowledgeChanged(errors.New("knowledge base not in route"))
	}
	fence := []string{rc.KBID}
	kbs, err := s.kbRows(ctx, a, fence)
	if err != nil {
		return ReadPage{}, classifyCore(err, nil)
	}
	if !kbs[rc.KBID].Enabled {
		return ReadPage{}, errKnowledgeChanged(errors.New("knowledge base disabled or removed"))
	}
	doc, err := s.document(ctx, a, rc.DocID, fence)
	if err != nil {
		return ReadPage{}, classifyCore(err, errKnowledgeChanged(nil))
	}
	if doc.Status != corefacts.StatusReady || doc.KBID != rc.KBID || doc.DocID != rc.DocID || docRevision(doc) != rc.DocRevision {
		return ReadPage{}, errKnowledgeChanged(errors.New("document not ready or revised"))
	}
	return ReadPage{
		Route: a.route.Key, RunID: req.runID, ScopeRevision: scope, Ref: req.ref,
		Revision: rc.DocRevision, Title: doc.Title, Content: doc.Content,
	}, nil
}

// writePage plans page within max_bytes, seals the next cursor when more
// follows, writes the answer into dst's memory (see ReadInto) and records
// it in the metrics and the disclosure.
func (s *Service) writePage(dst []byte, d *Disclosure, req readRequest, rc RefClaims, page ReadPage, now time.Time) ([]byte, error) {
	plan, ok := page.Plan(req.maxBytes, s.keys.cursorLen())
	if !ok {
		return nil, errInvalid("max_bytes is too small for this document; use a larger value.")
	}
	var cursor string
	n := plan.End - page.Offset
	if plan.More {
		var err error
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
	out := page.AppendJSON(dst[:0], plan, cursor)
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
