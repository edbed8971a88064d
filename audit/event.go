package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// Event is one line of the audit (docs/audit.md). Its fields are SPEC §11's;
// it has no field that could hold a bearer, a ref, a cursor, a query, a
// title, a summary or document text.
type Event struct {
	Time        time.Time `json:"time"`
	RequestID   string    `json:"request_id"`
	TraceID     string    `json:"trace_id"`
	Endpoint    string    `json:"endpoint"`
	Route       string    `json:"route"`
	SessionID   string    `json:"session_id"`
	ClientAppID string    `json:"client_app_id"`
	PrincipalID string    `json:"principal_id"`
	OnBehalfOf  string    `json:"on_behalf_of"`
	// ClientAddress is the request's client address as the edge resolved
	// it (the peer, or the client a trusted proxy names); "" when unknown.
	ClientAddress string     `json:"client_address"`
	RunID         string     `json:"run_id"`
	Status        string     `json:"status"`
	Error         string     `json:"error,omitempty"`
	Documents     []Document `json:"documents"`
	// QueryLength is a search query's length in UTF-16 code units (as
	// SPEC §4 counts it); nil for endpoints without a query.
	QueryLength *int `json:"query_length,omitempty"`
	// QueryHMAC is HMAC-SHA256(audit.query_hmac_key, query) in hex, when
	// the key is set.
	QueryHMAC string `json:"query_hmac,omitempty"`
}

// Document is one disclosed document; Range and BudgetExhausted are a read
// page's: the page's bytes [start, end) in the document's content (UTF-8)
// and whether the chain's 128 KiB budget ended the read there.
type Document struct {
	DocID           int64   `json:"doc_id"`
	KBID            string  `json:"kb_id"`
	Revision        string  `json:"revision"`
	Range           *[2]int `json:"range,omitempty"`
	BudgetExhausted *bool   `json:"budget_exhausted,omitempty"`
}

// eventOf builds d's event at now; key (may be nil) keys the query's HMAC.
func eventOf(ctx context.Context, d *knowledge.Disclosure, now time.Time, key []byte) Event {
	e := Event{
		Time:          now.UTC(),
		RequestID:     knowledge.RequestID(ctx),
		Endpoint:      d.Endpoint,
		Route:         d.Route,
		SessionID:     d.Session.SessionID,
		ClientAppID:   d.Session.ClientAppID,
		PrincipalID:   d.Session.Principal.ID,
		OnBehalfOf:    d.Session.OnBehalfOf,
		ClientAddress: knowledge.ClientAddress(ctx),
		RunID:         d.RunID,
		Status:        d.Status,
		Error:         string(d.Error),
		Documents:     make([]Document, 0, len(d.Documents)),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		e.TraceID = sc.TraceID().String()
	}
	for _, doc := range d.Documents {
		out := Document{DocID: doc.DocID, KBID: doc.KBID, Revision: doc.Revision}
		if doc.Page {
			out.Range = &[2]int{doc.Start, doc.End}
			out.BudgetExhausted = &doc.BudgetExhausted
		}
		e.Documents = append(e.Documents, out)
	}
	if d.HasQuery {
		n := jsstring.UTF16Len(d.Query)
		e.QueryLength = &n
		if len(key) > 0 {
			m := hmac.New(sha256.New, key)
			m.Write([]byte(d.Query))
			e.QueryHMAC = hex.EncodeToString(m.Sum(nil))
		}
	}
	return e
}
