package turn

import (
	"crypto/sha256"
	"sync"

	"github.com/bailinghub/knowledge-sidecar/ledger"
)

// inFlight is the set of on_demand attempts this process has forwarded and
// not yet had Core's answer for, by the turn's ledger keys and by the
// bearer's own keys. When the ledger (or identity) cannot be reached, a
// field-less turn is forwarded unbound — but not while an on_demand attempt
// of the same turn is in flight here: Core might replay that attempt's run
// to it with inline knowledge (SPEC §7: one mode per turn, whatever the
// interleaving).
type inFlight struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]int
}

func (f *inFlight) add(keys [][sha256.Size]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[[sha256.Size]byte]int{}
	}
	for _, k := range keys {
		f.m[k]++
	}
}

func (f *inFlight) done(keys [][sha256.Size]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.m[k]--; f.m[k] <= 0 {
			delete(f.m, k)
		}
	}
}

// onDemand reports whether any of keys has an on_demand attempt in flight.
func (f *inFlight) onDemand(keys [][sha256.Size]byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.m[k] > 0 {
			return true
		}
	}
	return false
}

// ledgerKeys are the turn's two idempotency keys in its session.
func ledgerKeys(k ledger.Key) [][sha256.Size]byte {
	return [][sha256.Size]byte{
		ledger.TupleHash("inflight-session-turn", k.SessionID, k.Route, k.ConversationID, k.TurnID),
		ledger.TupleHash("inflight-session-message", k.SessionID, k.Route, k.UserMessageID),
	}
}

// bearerKeys are the same keys under the caller's Authorization header,
// for when identity cannot be had (the session is then unknown). Both are
// hashes (ledger.TupleHash): no bearer is kept in memory as such.
func bearerKeys(authorization, route, conversationID, turnID, userMessageID string) [][sha256.Size]byte {
	return [][sha256.Size]byte{
		ledger.TupleHash("inflight-bearer-turn", authorization, route, conversationID, turnID),
		ledger.TupleHash("inflight-bearer-message", authorization, route, userMessageID),
	}
}
