package proxy

import (
	"context"
	"net/http"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The disclosure audit's side at the edge (SPEC §11): the knowledge
// service audits the answers it gives; the answers the edge gives itself to
// an on_demand turn (a refusal, Core's answer it could not deliver) or to
// an MCP request before a tool ran are audited here, in writeErr, with the
// status and code they are answered with.

// refusalAudit is what the audit records of a request whose sidecar-made
// answer is audited.
type refusalAudit struct {
	endpoint string
	route    corefacts.RouteKey
	sess     corefacts.Session // zero: refused or not known
}

// auditRefusals makes the edge's own answer to the request of ctx audited,
// once, under endpoint with the caller's identity; endpoint "" stops it
// (the answer is audited elsewhere, or not at all).
func auditRefusals(ctx context.Context, endpoint string, route corefacts.RouteKey, sess corefacts.Session) {
	st := stateOf(ctx)
	switch {
	case st == nil:
	case endpoint == "":
		st.refusal = nil
	default:
		st.refusal = &refusalAudit{endpoint: endpoint, route: route, sess: sess}
	}
}

// auditRefusal records the answer writeErr is about to give r (status,
// code) when the request's own answers are audited (auditRefusals).
func (s *Server) auditRefusal(r *http.Request, status int, code protocol.ErrorCode) {
	st := stateOf(r.Context())
	if st == nil || st.refusal == nil || s.feat == nil {
		return
	}
	a := st.refusal
	st.refusal = nil
	s.feat.k.Refused(r.Context(), a.endpoint, a.route, a.sess, status, code)
}
