package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// chainPages: a chain longer than this is a failure by itself.
const chainPages = 64

var readRequired = []string{"schema_version", "route", "knowledge_scope_revision", "ref", "revision", "title", "content", "trust",
	"next_cursor", "truncated", "budget_exhausted", "total_content_bytes", "read_chain_max_bytes"}

// Read check names and rules, shared by the checks and their skips.
const (
	ruleReadOK     = "a fresh ref reads with 200"
	ruleMaxBytes   = "max_bytes bounds the whole body"
	ruleReadShape  = "read answers the v1 fields with trust reference_only"
	ruleUTF8       = "pages never split a UTF-8 character"
	ruleMatchesHit = "a page matches its hint (title, revision)"
	rulePaging     = "every non-final page has next_cursor and truncated true; the last has next_cursor null"
	ruleComplete   = "a full read adds up to total_content_bytes and ends with truncated false"
)

var ruleChain = "a read chain serves at most " + strconv.Itoa(chainMax) + " content bytes, then budget_exhausted with next_cursor null"

func (r *runner) readBody(ref, cursor string, maxBytes int) map[string]any {
	b := map[string]any{"ref": ref, "max_bytes": maxBytes}
	if cursor != "" {
		b["cursor"] = cursor
	}
	if r.o.RunID != "" {
		b["run_id"] = r.o.RunID
	}
	return b
}

// page reads one page and notes the per-page checks.
func (r *runner) page(ctx context.Context, ref, cursor string, maxBytes int) (*hostclient.ReadAnswer, error) {
	res, err := r.postJSON(ctx, hostclient.Read, r.readBody(ref, cursor, maxBytes))
	if err != nil {
		return nil, r.lost(err, "read.ok", ruleReadOK)
	}
	if res.Status != http.StatusOK {
		r.note("read.ok", ruleReadOK, "got "+codeOf(res))
		return nil, nil
	}
	r.note("read.ok", ruleReadOK, "")
	v := ""
	if len(res.Body) > maxBytes {
		v = fmt.Sprintf("body of %d bytes for max_bytes %d", len(res.Body), maxBytes)
	}
	r.note("read.max_bytes", ruleMaxBytes, v)

	var obj map[string]json.RawMessage
	var p hostclient.ReadAnswer
	if json.Unmarshal(res.Body, &obj) != nil || json.Unmarshal(res.Body, &p) != nil {
		r.note("read.shape", ruleReadShape, "body is not a JSON object of the v1 shape")
		return nil, nil
	}
	sv := r.envelope(obj, readRequired, envelope{readSchema, p.SchemaVersion, p.Trust, p.Route, p.RunID})
	if p.Ref != ref {
		sv = append(sv, "ref not echoed verbatim")
	}
	if p.ReadChainMaxBytes != chainMax {
		sv = append(sv, fmt.Sprintf("read_chain_max_bytes %d", p.ReadChainMaxBytes))
	}
	if !isHex64(p.Revision) || !isHex64(p.ScopeRevision) {
		sv = append(sv, "revision or knowledge_scope_revision is not 64 lowercase hex")
	}
	r.note("read.shape", ruleReadShape, strings.Join(sv, "; "))

	v = ""
	switch {
	case !utf8.Valid(res.Body):
		v = "the body is not valid UTF-8"
	case strings.ContainsRune(p.Content, utf8.RuneError) && !bytes.Contains(res.Body, []byte("\uFFFD")) &&
		!bytes.Contains(bytes.ToLower(res.Body), []byte(`\ufffd`)):
		v = "the content carries a broken escape (half a surrogate pair)"
	}
	r.note("read.utf8", ruleUTF8, v)
	if p.NextCursor != nil && r.cursor == "" {
		r.cursor, r.cursorRef = *p.NextCursor, ref
	}
	return &p, nil
}

// firstPage reads the first page of a new document at the smallest size.
func (r *runner) firstPage(ctx context.Context, d *doc) error {
	p, err := r.page(ctx, d.ref, "", pageMin)
	if err != nil || p == nil {
		return err
	}
	d.total = p.TotalContentBytes
	v := ""
	if p.Title != d.title || p.Revision != d.revision {
		v = fmt.Sprintf("page title/revision differ from the hint's for %q", d.title)
	}
	r.note("read.matches_hint", ruleMatchesHit, v)
	return nil
}

// chain reads a ref until next_cursor is null; it returns the pages.
func (r *runner) chain(ctx context.Context, ref string, maxBytes int) ([]*hostclient.ReadAnswer, error) {
	var pages []*hostclient.ReadAnswer
	cursor := ""
	for len(pages) < chainPages {
		p, err := r.page(ctx, ref, cursor, maxBytes)
		if err != nil || p == nil {
			return pages, err
		}
		pages = append(pages, p)
		if p.NextCursor == nil {
			return pages, nil
		}
		cursor = *p.NextCursor
	}
	r.note("read.paging", rulePaging, fmt.Sprintf("the chain did not end after %d pages", chainPages))
	return pages, nil
}

// notePaging checks the paging states of a finished chain and returns the
// content bytes served.
func (r *runner) notePaging(pages []*hostclient.ReadAnswer) int64 {
	var served int64
	for i, p := range pages {
		served += int64(len(p.Content))
		last := i == len(pages)-1
		v := ""
		switch {
		case !last && (p.NextCursor == nil || !p.Truncated || p.BudgetExhausted):
			v = fmt.Sprintf("page %d of %d: next_cursor %v, truncated %v, budget_exhausted %v", i+1, len(pages), p.NextCursor != nil, p.Truncated, p.BudgetExhausted)
		case last && p.NextCursor != nil:
			v = fmt.Sprintf("page %d of %d still has a next_cursor", i+1, len(pages))
		}
		r.note("read.paging", rulePaging, v)
	}
	return served
}

// reads runs a full chain over a document that fits the chain budget and
// one over a document that does not.
func (r *runner) reads(ctx context.Context) error {
	if len(r.docs) == 0 {
		for _, c := range [][2]string{{"read.ok", ruleReadOK}, {"read.max_bytes", ruleMaxBytes}, {"read.shape", ruleReadShape},
			{"read.utf8", ruleUTF8}, {"read.matches_hint", ruleMatchesHit}, {"read.paging", rulePaging},
			{"read.complete", ruleComplete}, {"read.chain_budget", ruleChain}} {
			r.skip(c[0], c[1], "no document found")
		}
		return nil
	}
	// The largest document that fits the chain budget, in the smallest
	// pages that keep the chain short.
	var full *doc
	for _, d := range r.docs {
		if d.total >= 0 && d.total <= chainMax && (full == nil || d.total > full.total) {
			full = d
		}
	}
	if full == nil {
		r.skip("read.complete", ruleComplete, "every document found is larger than the chain budget")
	} else {
		size := pageMin
		if full.total > 8*pageMin {
			size = pageMax
		}
		pages, err := r.chain(ctx, full.ref, size)
		if err != nil {
			return err
		}
		if len(pages) > 0 {
			served := r.notePaging(pages)
			last := pages[len(pages)-1]
			v := ""
			if served != last.TotalContentBytes || last.Truncated || last.BudgetExhausted || last.NextCursor != nil {
				v = fmt.Sprintf("%d content bytes served of total_content_bytes %d; last page truncated %v, budget_exhausted %v",
					served, last.TotalContentBytes, last.Truncated, last.BudgetExhausted)
			}
			r.note("read.complete", ruleComplete, v)
		}
	}

	big := r.bigDoc()
	if big == nil {
		r.skip("read.chain_budget", ruleChain, fmt.Sprintf("no document larger than %d bytes found", chainMax))
		return nil
	}
	pages, err := r.chain(ctx, big.ref, pageMax)
	if err != nil || len(pages) == 0 {
		return err
	}
	served := r.notePaging(pages)
	last := pages[len(pages)-1]
	v := ""
	if served > chainMax || !last.BudgetExhausted || !last.Truncated || last.NextCursor != nil {
		v = fmt.Sprintf("%d content bytes over %d pages; last page truncated %v, budget_exhausted %v, next_cursor %v",
			served, len(pages), last.Truncated, last.BudgetExhausted, last.NextCursor != nil)
	}
	r.note("read.chain_budget", ruleChain, v)
	return nil
}

// expectRead posts a read body and notes the expected error.
func (r *runner) expectRead(ctx context.Context, name, rule string, body map[string]any, status int, code string) error {
	res, err := r.postJSON(ctx, hostclient.Read, body)
	if err != nil {
		return r.lost(err, name, rule)
	}
	r.note(name, rule, wantError(res, status, code))
	return nil
}

// tamper: refs and cursors are authenticated and bound to what they continue.
func (r *runner) tamper(ctx context.Context) error {
	const invalid = codeReferenceInvalid
	if err := r.expectRead(ctx, "read.legacy_ref", "an in-turn ref such as knowledge:1 → 400 knowledge_reference_invalid",
		map[string]any{"ref": "knowledge:1"}, 400, invalid); err != nil {
		return err
	}
	const (
		tRef, rRef       = "read.tampered_ref", "tampered ref rejected (400 knowledge_reference_invalid)"
		tCur, rCur       = "read.tampered_cursor", "tampered cursor rejected (400 knowledge_reference_invalid)"
		cAsRef, rAsRef   = "read.cursor_not_ref", "a cursor is not a valid ref (400 knowledge_reference_invalid)"
		cBound, rBound   = "read.cursor_bound", "a cursor continues only its own ref (400 knowledge_reference_invalid)"
		runBind, rRunBnd = "read.run_binding", "a ref is bound to its run (another run_id → 400 knowledge_reference_invalid)"
	)
	if len(r.docs) == 0 {
		for _, c := range [][2]string{{tRef, rRef}, {tCur, rCur}, {cAsRef, rAsRef}, {cBound, rBound}, {runBind, rRunBnd}} {
			r.skip(c[0], c[1], "no document found")
		}
		return nil
	}
	ref := r.docs[0].ref
	bad := []string{tamper(ref)}
	if len(ref) > 16 {
		bad = append(bad, ref[:len(ref)-8])
	}
	for _, b := range bad {
		if err := r.expectRead(ctx, tRef, rRef, r.readBody(b, "", pageMin), 400, invalid); err != nil {
			return err
		}
	}
	body := map[string]any{"ref": ref, "run_id": randomUUID()}
	if r.o.RunID != "" {
		body = map[string]any{"ref": ref} // the ref was issued for --run-id
	}
	if err := r.expectRead(ctx, runBind, rRunBnd, body, 400, invalid); err != nil {
		return err
	}
	if r.cursor == "" {
		for _, c := range [][2]string{{tCur, rCur}, {cAsRef, rAsRef}, {cBound, rBound}} {
			r.skip(c[0], c[1], "no document needed a second page")
		}
		return nil
	}
	if err := r.expectRead(ctx, tCur, rCur, r.readBody(r.cursorRef, tamper(r.cursor), pageMin), 400, invalid); err != nil {
		return err
	}
	if err := r.expectRead(ctx, cAsRef, rAsRef, r.readBody(r.cursor, "", pageMin), 400, invalid); err != nil {
		return err
	}
	for _, d := range r.docs {
		if d.ref != r.cursorRef {
			return r.expectRead(ctx, cBound, rBound, r.readBody(d.ref, r.cursor, pageMin), 400, invalid)
		}
	}
	r.skip(cBound, rBound, "only one document found")
	return nil
}

// expiry: refs and cursors expire after 300 s. Needs Options.Advance.
func (r *runner) expiry(ctx context.Context) error {
	var (
		nRef, rRef = "read.expired_ref", "a ref older than " + ttlText + " → 410 " + codeReferenceExpired
		nCur, rCur = "read.expired_cursor", "a cursor older than " + ttlText + " → 410 " + codeReferenceExpired
	)
	switch {
	case r.o.Advance == nil:
		r.skip(nRef, rRef, "black-box mode: refs live "+ttlText+" and the checker does not wait that long")
		r.skip(nCur, rCur, "black-box mode: refs live "+ttlText+" and the checker does not wait that long")
		return nil
	case len(r.docs) == 0:
		r.skip(nRef, rRef, "no document found")
		r.skip(nCur, rCur, "no document found")
		return nil
	}
	r.o.Advance(301 * time.Second)
	if err := r.expectRead(ctx, nRef, rRef, r.readBody(r.docs[0].ref, "", pageMin), 410, codeReferenceExpired); err != nil {
		return err
	}
	if r.cursor == "" {
		r.skip(nCur, rCur, "no document needed a second page")
		return nil
	}
	return r.expectRead(ctx, nCur, rCur, r.readBody(r.cursorRef, r.cursor, pageMin), 410, codeReferenceExpired)
}
