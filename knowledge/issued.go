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
	now := s.now()
	rc, err := s.keys.OpenRef(v.Ref)
	if err != nil || expired(rc.Expiry, now) {
		return false
	}
	if v.Cursor == nil {
		return true
	}
	cc, err := s.keys.OpenCursor(*v.Cursor)
	return err == nil && !expired(cc.Expiry, now) && cc.RefDigest == RefDigest(v.Ref)
}
