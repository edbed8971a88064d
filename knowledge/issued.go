package knowledge

import (
	"encoding/json"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// IssuedHere reports whether a read body (POST …/knowledge/read, SPEC §6)
// continues a chain this sidecar issued: its ref, and its cursor when it has
// one, authenticate under the sidecar's keys and have not expired. After a
// flip to a native Core such a read is still served by the sidecar (a
// native Core cannot open the sidecar's tokens), so a read chain started
// before the flip ends as it would have; every other read goes to Core.
//
// It is a cheap peek: no I/O, no identity. Anything that is not such a body
// (malformed JSON, wrong types, over protocol.MaxRequestBytes, a foreign,
// forged or expired token) is false. The read itself re-checks everything.
func (s *Service) IssuedHere(body []byte) bool {
	if len(body) > protocol.MaxRequestBytes || !strings.Contains(string(body), RefPrefix) {
		return false // no sidecar reference anywhere in it: skip the decode
	}
	var v struct {
		Ref    string  `json:"ref"`
		Cursor *string `json:"cursor"`
	}
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	cursor := ""
	if v.Cursor != nil {
		cursor = *v.Cursor
		if cursor == "" {
			return false // not a cursor: the read refuses it
		}
	}
	return s.IssuedRef(v.Ref, cursor)
}

// IssuedRef is IssuedHere for a ref and a cursor given as strings (a tool
// call's arguments; cursor "" when there is none): whether the ref, and the
// cursor continuing it, are the sidecar's own and have not expired.
func (s *Service) IssuedRef(ref, cursor string) bool {
	now := s.now()
	rc, err := s.keys.OpenRef(ref)
	if err != nil || expired(rc.Expiry, now) {
		return false
	}
	if cursor == "" {
		return true
	}
	cc, err := s.keys.OpenCursor(cursor)
	return err == nil && !expired(cc.Expiry, now) && cc.RefDigest == RefDigest(ref)
}
