package corefacts

import "strings"

// MaxAuthorizationBytes bounds the Authorization value the sidecar forwards
// to Core's identity calls. Core's bearer is "Bearer " + bha_ + base64url of
// 32 bytes (54 bytes, CORE_FACTS §1.1); a value past 4 KiB is no token Core
// issued, and forwarding it lets a caller make Core's HTTP front (Node,
// 16 KiB of headers) answer 431 instead of 401.
const MaxAuthorizationBytes = 4 << 10

// Core's Agent access token shape (authenticateAgentAccess, CORE_FACTS §1.1).
const (
	AccessTokenPrefix = "bha_"
	AccessTokenMinLen = 40
)

// BearerAcceptable reports whether an Authorization value could authenticate
// at Core's Agent Auth: at most MaxAuthorizationBytes, Core's
// /^Bearer ([^\s]+)$/i with a token of at least AccessTokenMinLen characters
// starting AccessTokenPrefix. Core answers every other value 401 without a
// lookup, so the sidecar answers it 401 itself without asking. The token's
// characters are held to printable ASCII: Core issues base64url, and a
// token outside it can match no session (Core looks sessions up by the
// SHA-256 of tokens it issued). The token itself is not interpreted.
func BearerAcceptable(v string) bool {
	const scheme = "Bearer "
	if len(v) > MaxAuthorizationBytes || len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)-1], scheme[:len(scheme)-1]) || v[len(scheme)-1] != ' ' {
		return false
	}
	tok := v[len(scheme):]
	if len(tok) < AccessTokenMinLen || !strings.HasPrefix(tok, AccessTokenPrefix) {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if b := tok[i]; b <= ' ' || b >= 0x7f {
			return false
		}
	}
	return true
}
