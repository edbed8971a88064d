package knowledge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// References and cursors (SPEC §5).
//
// Wire form: prefix ("kr1." for a reference, "kc1." for a cursor) followed by
// the unpadded base64url encoding of payload || HMAC-SHA256(purposeKey,
// payload). Only the canonical encoding is accepted, so a reference string
// and its bytes correspond one to one.
//
// Reference payload (big-endian integers):
//
//	version   1 byte  (1)
//	kind      1 byte  ('R')
//	key id    1 byte length (1–16) + bytes
//	expiry    8 bytes unix seconds
//	binding   32 bytes BindingDigest (client, session, principal, on_behalf_of, route, run)
//	scope     32 bytes knowledge scope revision
//	doc rev   32 bytes document revision
//	doc id    8 bytes
//	kb id     1 byte length (1–128) + bytes
//
// Cursor payload:
//
//	version   1 byte  (1)
//	kind      1 byte  ('C')
//	key id    1 byte length (1–16) + bytes
//	expiry    8 bytes unix seconds
//	ref       32 bytes SHA-256 of the exact reference string it continues
//	offset    8 bytes next byte offset into the document content
//	served    8 bytes content bytes already served along this reference's chain
//
// A cursor has a fixed size for a given key id, which lets the read budgeter
// account for next_cursor exactly before it is signed.

const (
	// RefPrefix starts every reference.
	RefPrefix = "kr1."
	// CursorPrefix starts every cursor.
	CursorPrefix = "kc1."
	// MaxTokenLen is the maximum length of a reference or cursor string.
	MaxTokenLen = 512
	// ReferenceTTL is the lifetime of references and cursors.
	ReferenceTTL = 300 * time.Second

	tokenVersion = 1
	kindRef      = 'R'
	kindCursor   = 'C'
	macLen       = sha256.Size
	maxKBIDLen   = 128
)

// ErrReferenceInvalid is returned by the codec for any reference or cursor
// that is malformed, has an unknown key id or a bad MAC. Its cause is
// deliberately vague.
var ErrReferenceInvalid = errors.New("invalid knowledge reference")

// tokenEncoding is strict base64url without padding: non-canonical trailing
// bits are rejected.
var tokenEncoding = base64.RawURLEncoding.Strict()

// Binding is the identity a reference is issued to. Its digest is carried in
// the reference; a read recomputes it from the current session, route and
// run_id and rejects the reference on any difference.
type Binding struct {
	ClientAppID string
	SessionID   string
	PrincipalID string
	OnBehalfOf  string
	Route       string
	RunID       string // canonical lowercase UUID, "" when absent
}

// Digest is SHA-256 over the length-prefixed fields of b.
func (b Binding) Digest() [32]byte {
	h := sha256.New()
	h.Write([]byte("bailing.agent-knowledge.v1/binding"))
	var n [4]byte
	for _, f := range []string{b.ClientAppID, b.SessionID, b.PrincipalID, b.OnBehalfOf, b.Route, b.RunID} {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// RefClaims is what a reference carries.
type RefClaims struct {
	KeyID         string    // set by OpenRef; ignored by SealRef (the signing key is used)
	Expiry        time.Time // whole seconds
	Binding       [32]byte  // Binding.Digest()
	ScopeRevision string    // 64 lowercase hex
	DocRevision   string    // 64 lowercase hex
	DocID         int64     // > 0
	KBID          string    // 1–128 bytes
}

// CursorClaims is what a cursor carries.
type CursorClaims struct {
	KeyID      string    // set by OpenCursor; ignored by SealCursor
	Expiry     time.Time // whole seconds
	RefDigest  [32]byte  // RefDigest(ref) of the reference it continues
	NextOffset int64     // next byte offset into the content
	Served     int64     // content bytes already served along the chain
}

// RefDigest binds a cursor to the exact reference string it continues.
func RefDigest(ref string) [32]byte { return sha256.Sum256([]byte(ref)) }

// SealRef signs c with the signing key and returns the reference string.
func (k *Keyring) SealRef(c RefClaims) (string, error) {
	key := &k.keys[0]
	scope, err := decodeRevision(c.ScopeRevision)
	if err != nil {
		return "", fmt.Errorf("scope revision: %w", err)
	}
	rev, err := decodeRevision(c.DocRevision)
	if err != nil {
		return "", fmt.Errorf("document revision: %w", err)
	}
	if c.DocID <= 0 {
		return "", errors.New("document id must be positive")
	}
	if len(c.KBID) == 0 || len(c.KBID) > maxKBIDLen {
		return "", errors.New("kb id must be 1-128 bytes")
	}
	p := make([]byte, 0, 3+len(key.id)+8+32*3+8+1+len(c.KBID)+macLen)
	p = appendHeader(p, kindRef, key.id, c.Expiry)
	p = append(p, c.Binding[:]...)
	p = append(p, scope[:]...)
	p = append(p, rev[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.DocID))
	p = append(p, byte(len(c.KBID)))
	p = append(p, c.KBID...)
	return seal(RefPrefix, key.ref, p), nil
}

// OpenRef verifies a reference and returns its claims. It does not check
// expiry or binding; those are separate steps of the check order.
func (k *Keyring) OpenRef(s string) (RefClaims, error) {
	body, keyID, err := k.open(s, RefPrefix, kindRef)
	if err != nil {
		return RefClaims{}, err
	}
	var c RefClaims
	c.KeyID = keyID
	c.Expiry = time.Unix(int64(binary.BigEndian.Uint64(body[:8])), 0).UTC()
	body = body[8:]
	if len(body) < 32*3+8+1 {
		return RefClaims{}, ErrReferenceInvalid
	}
	copy(c.Binding[:], body[:32])
	c.ScopeRevision = hex.EncodeToString(body[32:64])
	c.DocRevision = hex.EncodeToString(body[64:96])
	c.DocID = int64(binary.BigEndian.Uint64(body[96:104]))
	n := int(body[104])
	body = body[105:]
	if n == 0 || n > maxKBIDLen || len(body) != n || c.DocID <= 0 {
		return RefClaims{}, ErrReferenceInvalid
	}
	c.KBID = string(body)
	return c, nil
}

// SealCursor signs c with the signing key and returns the cursor string.
func (k *Keyring) SealCursor(c CursorClaims) (string, error) {
	if c.NextOffset < 0 || c.Served < 0 {
		return "", errors.New("cursor offsets must not be negative")
	}
	key := &k.keys[0]
	p := make([]byte, 0, 3+len(key.id)+8+32+16+macLen)
	p = appendHeader(p, kindCursor, key.id, c.Expiry)
	p = append(p, c.RefDigest[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.NextOffset))
	p = binary.BigEndian.AppendUint64(p, uint64(c.Served))
	return seal(CursorPrefix, key.cursor, p), nil
}

// OpenCursor verifies a cursor and returns its claims. It does not check
// expiry or which reference it continues.
func (k *Keyring) OpenCursor(s string) (CursorClaims, error) {
	body, keyID, err := k.open(s, CursorPrefix, kindCursor)
	if err != nil {
		return CursorClaims{}, err
	}
	if len(body) != 8+32+16 {
		return CursorClaims{}, ErrReferenceInvalid
	}
	var c CursorClaims
	c.KeyID = keyID
	c.Expiry = time.Unix(int64(binary.BigEndian.Uint64(body[:8])), 0).UTC()
	copy(c.RefDigest[:], body[8:40])
	c.NextOffset = int64(binary.BigEndian.Uint64(body[40:48]))
	c.Served = int64(binary.BigEndian.Uint64(body[48:56]))
	if c.NextOffset < 0 || c.Served < 0 {
		return CursorClaims{}, ErrReferenceInvalid
	}
	return c, nil
}

// cursorLen is the length of every cursor signed by this keyring.
func (k *Keyring) cursorLen() int {
	raw := 3 + len(k.keys[0].id) + 8 + 32 + 16 + macLen
	return len(CursorPrefix) + tokenEncoding.EncodedLen(raw)
}

func appendHeader(p []byte, kind byte, keyID string, expiry time.Time) []byte {
	p = append(p, tokenVersion, kind, byte(len(keyID)))
	p = append(p, keyID...)
	return binary.BigEndian.AppendUint64(p, uint64(expiry.Unix()))
}

func seal(prefix string, key, payload []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	full := m.Sum(payload)
	out := make([]byte, len(prefix)+tokenEncoding.EncodedLen(len(full)))
	copy(out, prefix)
	tokenEncoding.Encode(out[len(prefix):], full)
	return string(out)
}

// open checks prefix, canonical encoding, header and MAC, and returns the
// payload after the key id (expiry onwards).
func (k *Keyring) open(s, prefix string, kind byte) (body []byte, keyID string, err error) {
	if len(s) > MaxTokenLen || !strings.HasPrefix(s, prefix) {
		return nil, "", ErrReferenceInvalid
	}
	enc := s[len(prefix):]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, "", ErrReferenceInvalid
		}
	}
	raw, err := tokenEncoding.DecodeString(enc)
	if err != nil || len(raw) < 3+1+8+macLen {
		return nil, "", ErrReferenceInvalid
	}
	payload, mac := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	if payload[0] != tokenVersion || payload[1] != kind {
		return nil, "", ErrReferenceInvalid
	}
	idLen := int(payload[2])
	if idLen < 1 || idLen > maxKeyIDLen || len(payload) < 3+idLen+8 {
		return nil, "", ErrReferenceInvalid
	}
	keyID = string(payload[3 : 3+idLen])
	key, ok := k.byID[keyID]
	if !ok {
		return nil, "", ErrReferenceInvalid
	}
	macKey := key.ref
	if kind == kindCursor {
		macKey = key.cursor
	}
	m := hmac.New(sha256.New, macKey)
	m.Write(payload)
	if !hmac.Equal(m.Sum(nil), mac) {
		return nil, "", ErrReferenceInvalid
	}
	return payload[3+idLen:], keyID, nil
}

func decodeRevision(s string) ([32]byte, error) {
	var out [32]byte
	if len(s) != 64 {
		return out, errors.New("want 64 lowercase hex characters")
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return out, errors.New("want 64 lowercase hex characters")
		}
	}
	_, err := hex.Decode(out[:], []byte(s))
	return out, err
}
