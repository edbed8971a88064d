package knowledge

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The endpoints a Disclosure names (SPEC §11); an MCP tool call is
// MCPEndpoint(tool).
const (
	EndpointSearch = "search"
	EndpointRead   = "read"
	EndpointTurn   = "turn"
	// EndpointMCP is an MCP request the edge refused before any tool ran.
	EndpointMCP = "mcp"
)

// MCPEndpoint is the endpoint of a call of the MCP tool named tool:
// "mcp:knowledge_search".
func MCPEndpoint(tool string) string { return "mcp:" + tool }

// Statuses of a refused (4xx) or failed (5xx) answer in a Disclosure; a
// served answer carries its protocol status (ok, partial, unavailable,
// disabled; a read page is ok).
const (
	DisclosureRefused = "refused"
	DisclosureFailed  = "failed"
)

// Disclosure is what one answer of search, read or an on_demand turn's hints
// disclosed, as the service knows it, handed to the Auditor before the answer
// is sent (SPEC §11). It holds no bearer, ref, cursor, title, summary or
// document text; Query is there only for the auditor to measure and key-hash
// it, never to record.
type Disclosure struct {
	Endpoint string
	Route    string
	// Session is the caller's identity (zero when identity failed).
	Session corefacts.Session
	RunID   string
	Status  string
	// Error is the code of a refused or failed answer.
	Error protocol.ErrorCode
	// Documents are the documents the answer disclosed, best first (empty
	// for a refused, failed or empty answer).
	Documents []DisclosedDocument
	// Query is a search's query; HasQuery tells an empty one from none.
	Query    string
	HasQuery bool
}

// DisclosedDocument is one document of an answer: a hint's, or a read
// page's with the page's byte range [Start, End) in the document's content
// and whether the chain's budget ended the read there.
type DisclosedDocument struct {
	DocID           int64
	KBID            string
	Revision        string
	Page            bool // Start, End and BudgetExhausted are set (a read)
	Start, End      int
	BudgetExhausted bool
}

// Auditor records disclosures (package audit). Disclose is called once per
// answer before it is sent; a non-nil error means the answer must not be
// sent (audit.on_failure: refuse) and it becomes 503 knowledge_unavailable.
// A policy that lets answers go without their event returns nil.
type Auditor interface {
	Disclose(ctx context.Context, d *Disclosure) error
}

// RequestIDKey is the context key under which the edge answers the request
// id (a string) of the request a context belongs to.
type RequestIDKey struct{}

// RequestID is the request id in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(RequestIDKey{}).(string)
	return id
}

// ClientAddressKey is the context key under which the edge answers the
// resolved client address (a string: the peer, or the client a trusted
// proxy names) of the request a context belongs to.
type ClientAddressKey struct{}

// ClientAddress is the client address in ctx, or "".
func ClientAddress(ctx context.Context) string {
	a, _ := ctx.Value(ClientAddressKey{}).(string)
	return a
}

type endpointKey struct{}

// WithEndpoint names the endpoint the disclosures of the calls made with ctx
// are recorded under (MCPEndpoint(tool) for an MCP tool call served by the
// service); without it they are search, read or turn.
func WithEndpoint(ctx context.Context, endpoint string) context.Context {
	return context.WithValue(ctx, endpointKey{}, endpoint)
}

// auditing starts the disclosure of an answer of endpoint (nil when the
// audit is off: every use below is nil-safe).
func (s *Service) auditing(endpoint string, route corefacts.RouteKey) *Disclosure {
	if s.audit == nil {
		return nil
	}
	return &Disclosure{Endpoint: endpoint, Route: route.String()}
}

func (d *Disclosure) identified(sess corefacts.Session) {
	if d != nil {
		d.Session = sess
	}
}

func (d *Disclosure) asked(query string, hasQuery bool, runID string) {
	if d != nil {
		d.Query, d.HasQuery, d.RunID = query, hasQuery, runID
	}
}

// hints records a served search or turn answer.
func (d *Disclosure) hints(status string, hints []Hint) {
	if d == nil {
		return
	}
	d.Status = status
	d.Documents = make([]DisclosedDocument, 0, len(hints))
	for _, h := range hints {
		d.Documents = append(d.Documents, DisclosedDocument{DocID: h.docID, KBID: h.kbID, Revision: h.Revision})
	}
}

// disclose hands d, completed with the answer's error, to the auditor and
// returns the answer to send: out and err, or 503 when the auditor refuses
// an answer that would disclose without its event.
func (s *Service) disclose(ctx context.Context, d *Disclosure, out []byte, err error) ([]byte, error) {
	if d == nil {
		return out, err
	}
	if name, ok := ctx.Value(endpointKey{}).(string); ok {
		d.Endpoint = name
	}
	if err != nil {
		d.Documents = nil
		d.Status, d.Error = DisclosureFailed, protocol.CodeUnavailable
		var ke *Error
		if errors.As(err, &ke) {
			d.Error = ke.Code
			if ke.Status < 500 {
				d.Status = DisclosureRefused
			}
		}
	}
	if g, ok := ctx.Value(groupKey{}).(*DisclosureGroup); ok {
		g.mu.Lock()
		g.ds = append(g.ds, d)
		g.mu.Unlock()
		return out, err // recorded with the group (DiscloseGroup)
	}
	if aerr := s.audit.Disclose(ctx, d); aerr != nil && err == nil {
		return nil, errUnavailable(aerr)
	}
	return out, err
}

// Refused records an answer the sidecar gave a request of endpoint without
// the service answering it — its own refusal of an on_demand turn or of an
// MCP request, or a Core answer to such a turn it could not deliver — with
// the answer's HTTP status and error code and the caller's identity (zero
// when refused or unknown). A refusal discloses nothing, so it keeps its
// status whatever the auditor says. A no-op with the audit off.
func (s *Service) Refused(ctx context.Context, endpoint string, route corefacts.RouteKey, sess corefacts.Session, status int, code protocol.ErrorCode) {
	if s.audit == nil {
		return
	}
	d := &Disclosure{Endpoint: endpoint, Route: route.String(), Session: sess, Status: DisclosureRefused, Error: code}
	if status >= 500 {
		d.Status = DisclosureFailed
	}
	_ = s.audit.Disclose(ctx, d)
}

type groupKey struct{}

// DisclosureGroup gathers the disclosures of the calls made with one
// context — the pages one MCP tool call reads — so that the answer built
// from them is recorded as one event naming what it showed (SPEC §11:
// exactly one event per disclosing answer; DiscloseGroup).
type DisclosureGroup struct {
	mu sync.Mutex
	ds []*Disclosure
}

// WithDisclosureGroup starts a group for the calls made with the returned
// context.
func WithDisclosureGroup(ctx context.Context) context.Context {
	return context.WithValue(ctx, groupKey{}, &DisclosureGroup{})
}

// Shown is what of a group's read pages an answer showed: from byte Skip of
// page First through the end of page Last (pages counted in the order they
// were read, from 0) — or, with Keep, only its first Keep bytes (a window
// that ends inside a page); with None, no page.
type Shown struct {
	First, Skip, Last, Keep int
	None                    bool
	// Refused, when set, is the error code of a result that showed none of
	// the pages read (refused after them: the answer budget's overloaded).
	Refused protocol.ErrorCode
}

// DiscloseGroup hands the auditor one disclosure for the group in ctx: the
// last call's (an answer that failed on its last call discloses nothing),
// with a read's pages as one range per document — shown's, or every page
// read when shown is nil. An error means the answer must not be sent
// (audit.on_failure: refuse), as for Disclose.
func (s *Service) DiscloseGroup(ctx context.Context, shown *Shown) error {
	g, ok := ctx.Value(groupKey{}).(*DisclosureGroup)
	if !ok || s.audit == nil {
		return nil
	}
	g.mu.Lock()
	ds := slices.Clone(g.ds)
	g.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	last := ds[len(ds)-1]
	d := *last
	switch {
	case shown != nil && shown.Refused != "":
		d.Documents, d.Status, d.Error = nil, DisclosureRefused, shown.Refused
	case d.Status != DisclosureRefused && d.Status != DisclosureFailed && len(ds) > 1 || shown != nil:
		d.Documents = pagesShown(ds, shown)
	}
	return s.audit.Disclose(ctx, &d)
}

// pagesShown is the documents of the read pages ds from shown.First (its
// first Skip bytes left out) through shown.Last, one range per document.
func pagesShown(ds []*Disclosure, shown *Shown) []DisclosedDocument {
	if shown != nil && shown.None {
		return nil
	}
	first, skip, last, keep := 0, 0, len(ds)-1, 0
	if shown != nil && 0 <= shown.First && shown.First <= shown.Last && shown.Last < len(ds) {
		first, skip, last, keep = shown.First, max(shown.Skip, 0), shown.Last, max(shown.Keep, 0)
	}
	var out []DisclosedDocument
	for i, d := range ds[first : last+1] {
		for _, doc := range d.Documents {
			if !doc.Page {
				continue
			}
			if keep > 0 && first+i == last {
				doc.End = min(doc.End, doc.Start+keep)
			}
			if n := len(out); n > 0 && out[n-1].DocID == doc.DocID && out[n-1].KBID == doc.KBID && out[n-1].End == doc.Start {
				out[n-1].End, out[n-1].BudgetExhausted = doc.End, doc.BudgetExhausted
				continue
			}
			out = append(out, doc)
		}
	}
	if len(out) > 0 {
		out[0].Start = min(out[0].Start+skip, out[0].End)
	}
	return out
}
