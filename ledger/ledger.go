package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"

	"github.com/bailinghub/knowledge-sidecar/config"
)

// Key names one turn under both of Core's idempotency keys. All fields are
// required and must already be trimmed the way Core trims them.
type Key struct {
	SessionID, Route, ConversationID, TurnID, UserMessageID string
}

var (
	// ErrConflict: the turn id or the user message id is already bound to a
	// different knowledge delivery mode. The proxy answers 409 turn_conflict.
	ErrConflict = errors.New("turn id or user message id is already bound to a different knowledge delivery mode")
	// ErrUnavailable: the backend cannot be reached (or is closed).
	ErrUnavailable = errors.New("turn ledger unavailable")
	// ErrInvalidKey: a Key field or the mode is empty. This is a caller bug:
	// turns without all three ids are left to Core, which rejects them.
	ErrInvalidKey = errors.New("turn ledger key or mode is incomplete")
)

// DefaultTTL is used when a backend is configured with a TTL ≤ 0: the
// documented default of ledger.ttl (config.Defaults is its one source).
var DefaultTTL = config.Defaults().Ledger.TTL

// Ledger is the turn-mode ledger.
type Ledger interface {
	// Reserve records mode under both keys (session,route,conversation,turn) and
	// (session,route,user_message_id) atomically. Same mode already there (under
	// either or both keys) → created=false, nil (a retry; both records are
	// rewritten with a fresh TTL). A different mode under either key →
	// ErrConflict and nothing written. New (neither key held a live record) →
	// both written with the TTL, created=true.
	//
	// Only a caller that got created=true should Release on a Core refusal:
	// a retry's records may belong to a run Core already has.
	Reserve(ctx context.Context, k Key, mode string) (created bool, err error)
	// Release removes both records if they still hold mode (Core refused the turn
	// with a 4xx other than 409, so no run exists). Never removes another mode's record.
	Release(ctx context.Context, k Key, mode string) error
	// Close releases the backend's resources. Later calls fail with ErrUnavailable.
	Close() error
}

// validate reports ErrInvalidKey when any part of k or mode is empty.
func (k Key) validate(mode string) error {
	if k.SessionID == "" || k.Route == "" || k.ConversationID == "" || k.TurnID == "" ||
		k.UserMessageID == "" || mode == "" {
		return ErrInvalidKey
	}
	return nil
}

// Domain-separation labels of the hashed tuples. Changing any of them (or the
// encoding) orphans every existing record, so bump the version together with
// the Redis key prefix.
const (
	hashDomain  = "knowledge-sidecar/turn-mode-ledger/v1"
	kindTurn    = "turn"
	kindMessage = "user_message"
	kindSlot    = "slot"
)

// tupleHash is SHA-256 over the length-prefixed encoding of the domain, the
// kind and every part, so no two different tuples share an encoding.
func tupleHash(kind string, parts ...string) [sha256.Size]byte {
	h := sha256.New()
	writeLP(h, hashDomain)
	writeLP(h, kind)
	for _, p := range parts {
		writeLP(h, p)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func writeLP(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// turnHash and messageHash are the two record identities of a turn.
func (k Key) turnHash() [sha256.Size]byte {
	return tupleHash(kindTurn, k.SessionID, k.Route, k.ConversationID, k.TurnID)
}

func (k Key) messageHash() [sha256.Size]byte {
	return tupleHash(kindMessage, k.SessionID, k.Route, k.UserMessageID)
}

// slotHash is shared by both records of a turn (it covers only session and
// route), used as a Redis hash tag so both keys live in one cluster slot.
func (k Key) slotHash() [sha256.Size]byte {
	return tupleHash(kindSlot, k.SessionID, k.Route)
}
