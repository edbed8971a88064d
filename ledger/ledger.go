package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"time"
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

// The ledger's defaults, their one source (config's Defaults maps them onto
// ledger.ttl and ledger.max_entries).
const (
	// DefaultTTL is used when a backend is configured with a TTL ≤ 0.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxEntries bounds the memory backend when it is given ≤ 0.
	DefaultMaxEntries = 100000
)

// Reservation is one attempt's hold on a turn's two records, from Reserve.
// Pass it to Release when Core refused that attempt.
type Reservation struct {
	// Created: neither key held a live record before this attempt.
	Created bool
	// tokens name the generation of the turn record and of the user
	// message record this attempt joined (or created); "" for a record
	// that carries no attempt count (written by an older version), which
	// is never released.
	tokens [2]string
}

// Ledger is the turn-mode ledger.
//
// Every record counts the attempts that reserved it and were not released
// since. Release removes a record only when the last of them is released,
// and only the generation the attempt reserved: so the records of a turn
// stay while any attempt that joined them may have created Core's run
// (SPEC §7), whatever the interleaving.
type Ledger interface {
	// Reserve records mode under both keys (session,route,conversation,turn) and
	// (session,route,user_message_id) atomically. A different mode under either
	// key → ErrConflict and nothing written. Otherwise each record is created
	// (with one attempt) or joined (one more attempt), and both get a fresh
	// TTL; Created reports that neither key held a live record.
	Reserve(ctx context.Context, k Key, mode string) (Reservation, error)
	// Release is called for an attempt Core did not create a run for (it
	// answered a 4xx, or never received the request). It drops the
	// attempt's share of each record it reserved; a record whose last
	// share goes is removed. Records of another mode, or created anew after
	// the reservation, are left alone.
	Release(ctx context.Context, k Key, mode string, r Reservation) error
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
	kindSession = "session"
)

// TupleHash is SHA-256 over the length-prefixed encoding of the ledger's
// domain, the kind and every part, so no two different tuples share an
// encoding. Beside the records' keys here, it keys the turn interceptor's
// in-flight set (package turn), under kinds of its own.
func TupleHash(kind string, parts ...string) [sha256.Size]byte {
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
	return TupleHash(kindTurn, k.SessionID, k.Route, k.ConversationID, k.TurnID)
}

func (k Key) messageHash() [sha256.Size]byte {
	return TupleHash(kindMessage, k.SessionID, k.Route, k.UserMessageID)
}

// slotHash is shared by both records of a turn (it covers only session and
// route), used as a Redis hash tag so both keys live in one cluster slot.
func (k Key) slotHash() [sha256.Size]byte {
	return TupleHash(kindSlot, k.SessionID, k.Route)
}

// sessionHash names the session whose records the memory ledger caps.
func (k Key) sessionHash() [sha256.Size]byte {
	return TupleHash(kindSession, k.SessionID)
}
