package knowledge

import (
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// References and cursors (SPEC §5, version 2: confidential as well as
// authentic).
//
// Wire form:
//
//	prefix  key-id  "."  base64url(nonce || ciphertext || tag)
//
// prefix is "kr2." for a reference and "kc2." for a cursor; key id is the id
// of the sealing key (1–16 characters of [A-Za-z0-9_-], so it never contains
// a dot); nonce is 24 random bytes; ciphertext and tag are the
// XChaCha20-Poly1305 sealing of the claims under the key's per-purpose key,
// with the token's head (prefix, key id and the dot) as associated data.
// Nothing but the prefix, the key id and the ciphertext is visible: the KB
// id, document id, revisions and the binding digest are encrypted. The
// base64url encoding is unpadded and strict, so a token string and its bytes
// correspond one to one.
//
// Reference plaintext (big-endian integers):
//
//	expiry    8 bytes unix seconds
//	binding   32 bytes BindingDigest (client, session, principal, on_behalf_of, route, run)
//	scope     32 bytes knowledge scope revision
//	doc rev   32 bytes document revision
//	doc id    8 bytes
//	kb id     the remaining 1–128 bytes
//
// Cursor plaintext:
//
//	expiry    8 bytes unix seconds
//	ref       32 bytes SHA-256 of the exact reference string it continues
//	offset    8 bytes next byte offset into the document content
//	served    8 bytes content bytes already served along this reference's chain
//
// A cursor has a fixed size for a given key id, which lets the read budgeter
// account for next_cursor exactly before it is sealed. The longest reference
// (16-character key id, 128-byte KB id) is 395 bytes (maxRefLen).
//
// Version 1 tokens ("kr1."/"kc1.", readable HMAC-signed payloads) are refused
// as invalid: they lived five minutes, and clients search again.

const (
	// RefPrefix starts every reference.
	RefPrefix = "kr2."
	// CursorPrefix starts every cursor.
	CursorPrefix   = "kc2."
	nonceLen       = chacha20poly1305.NonceSizeX
	tagLen         = chacha20poly1305.Overhead
	refFixedLen    = 8 + 32 + 32 + 32 + 8 // reference plaintext before the KB id
	cursorPlainLen = 8 + 32 + 8 + 8
	maxKBIDLen     = 128

	// maxRefLen is the length of the longest possible reference (the
	// longest key id and KB id): tokenLen(RefPrefix, maxKeyIDLen,
	// refFixedLen+maxKBIDLen), spelled out as a constant.
	maxRefLen = len(RefPrefix) + maxKeyIDLen + 1 + ((nonceLen+refFixedLen+maxKBIDLen+tagLen)*8+5)/6
)

// tokenLen is the length of a token with a key id of idLen bytes and a
// plaintext of plainLen bytes.
func tokenLen(prefix string, idLen, plainLen int) int {
	return len(prefix) + idLen + 1 + tokenEncoding.EncodedLen(nonceLen+plainLen+tagLen)
}

// ErrReferenceInvalid is returned by the codec for any reference or cursor
// that is malformed, has an unknown key id or does not authenticate. Its
// cause is deliberately vague.
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
	h.Write([]byte(protocol.Name + "/binding"))
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
	KeyID         string    // set by OpenRef; ignored by SealRef (the sealing key is used)
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

// SealRef encrypts c under the sealing key and returns the reference
// string.
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
	var buf [refFixedLen + maxKBIDLen]byte
	p := binary.BigEndian.AppendUint64(buf[:0], uint64(c.Expiry.Unix()))
	p = append(p, c.Binding[:]...)
	p = append(p, scope[:]...)
	p = append(p, rev[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.DocID))
	p = append(p, c.KBID...)
	return sealToken(RefPrefix, key.id, key.ref, p), nil
}

// OpenRef authenticates and decrypts a reference and returns its claims. It
// does not check expiry or binding; those are separate steps of the check
// order.
func (k *Keyring) OpenRef(s string) (RefClaims, error) {
	p, keyID, err := k.open(s, RefPrefix)
	if err != nil {
		return RefClaims{}, err
	}
	n := len(p) - refFixedLen // KB id length
	if n < 1 || n > maxKBIDLen {
		return RefClaims{}, ErrReferenceInvalid
	}
	c := RefClaims{
		KeyID:  keyID,
		Expiry: time.Unix(int64(binary.BigEndian.Uint64(p[:8])), 0).UTC(),
	}
	copy(c.Binding[:], p[8:40])
	var revs [128]byte // both revisions in one string
	hex.Encode(revs[:], p[40:104])
	both := string(revs[:])
	c.ScopeRevision, c.DocRevision = both[:64], both[64:]
	c.DocID = int64(binary.BigEndian.Uint64(p[104:112]))
	if c.DocID <= 0 {
		return RefClaims{}, ErrReferenceInvalid
	}
	c.KBID = string(p[refFixedLen:])
	return c, nil
}

// SealCursor encrypts c under the sealing key and returns the cursor string.
func (k *Keyring) SealCursor(c CursorClaims) (string, error) {
	if c.NextOffset < 0 || c.Served < 0 {
		return "", errors.New("cursor offsets must not be negative")
	}
	key := &k.keys[0]
	var buf [cursorPlainLen]byte
	p := binary.BigEndian.AppendUint64(buf[:0], uint64(c.Expiry.Unix()))
	p = append(p, c.RefDigest[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.NextOffset))
	p = binary.BigEndian.AppendUint64(p, uint64(c.Served))
	return sealToken(CursorPrefix, key.id, key.cursor, p), nil
}

// OpenCursor authenticates and decrypts a cursor and returns its claims. It
// does not check expiry or which reference it continues.
func (k *Keyring) OpenCursor(s string) (CursorClaims, error) {
	p, keyID, err := k.open(s, CursorPrefix)
	if err != nil {
		return CursorClaims{}, err
	}
	if len(p) != cursorPlainLen {
		return CursorClaims{}, ErrReferenceInvalid
	}
	c := CursorClaims{
		KeyID:      keyID,
		Expiry:     time.Unix(int64(binary.BigEndian.Uint64(p[:8])), 0).UTC(),
		NextOffset: int64(binary.BigEndian.Uint64(p[40:48])),
		Served:     int64(binary.BigEndian.Uint64(p[48:56])),
	}
	copy(c.RefDigest[:], p[8:40])
	if c.NextOffset < 0 || c.Served < 0 {
		return CursorClaims{}, ErrReferenceInvalid
	}
	return c, nil
}

// cursorLen is the length of every cursor sealed by this keyring.
func (k *Keyring) cursorLen() int {
	return tokenLen(CursorPrefix, len(k.keys[0].id), cursorPlainLen)
}

// sealToken encrypts plain with the token head (prefix, key id, dot) as
// associated data under a fresh random nonce and returns the token. The
// head, the encoding and the raw nonce || ciphertext || tag share one
// buffer.
func sealToken(prefix, keyID string, aead cipher.AEAD, plain []byte) string {
	head := len(prefix) + len(keyID) + 1
	rawLen := nonceLen + len(plain) + tagLen
	tokLen := head + tokenEncoding.EncodedLen(rawLen)
	out := make([]byte, tokLen+rawLen)
	copy(out, prefix)
	copy(out[len(prefix):], keyID)
	out[head-1] = '.'
	raw := out[tokLen:]
	nonce := raw[:nonceLen]
	// crypto/rand.Read never returns an error (Go ≥ 1.24): it crashes the
	// program rather than hand out a predictable nonce.
	rand.Read(nonce)
	// Sealed in place, so plain (a stack buffer of the caller) never escapes.
	copy(raw[nonceLen:], plain)
	aead.Seal(raw[nonceLen:nonceLen], nonce, raw[nonceLen:nonceLen+len(plain)], out[:head])
	tokenEncoding.Encode(out[head:tokLen], raw)
	return string(out[:tokLen])
}

// open checks the prefix, the key id, the canonical encoding and the AEAD
// tag, and returns the plaintext and the key id. The key is picked by the id
// in the token; an unknown id fails without trying any key.
func (k *Keyring) open(s, prefix string) (plain []byte, keyID string, err error) {
	if len(s) > protocol.MaxTokenBytes || !strings.HasPrefix(s, prefix) {
		return nil, "", ErrReferenceInvalid
	}
	dot := strings.IndexByte(s[len(prefix):], '.')
	if dot < 1 || dot > maxKeyIDLen {
		return nil, "", ErrReferenceInvalid
	}
	head := len(prefix) + dot + 1
	key, ok := k.byID[s[len(prefix):head-1]]
	if !ok {
		return nil, "", ErrReferenceInvalid
	}
	enc := s[head:]
	// The strict decoder refuses every byte outside the base64url alphabet,
	// padding included, except CR and LF, which it skips.
	if strings.IndexByte(enc, '\r') >= 0 || strings.IndexByte(enc, '\n') >= 0 {
		return nil, "", ErrReferenceInvalid
	}
	// One buffer holds the associated data (the head) and the raw bytes.
	buf := make([]byte, head+tokenEncoding.DecodedLen(len(enc)))
	ad := buf[:copy(buf, s[:head])]
	n, err := tokenEncoding.Decode(buf[head:], []byte(enc))
	raw := buf[head : head+n]
	if err != nil || len(raw) < nonceLen+tagLen {
		return nil, "", ErrReferenceInvalid
	}
	aead := key.cursor // the purpose follows from the prefix: only two exist
	if prefix == RefPrefix {
		aead = key.ref
	}
	plain, err = aead.Open(raw[nonceLen:nonceLen], raw[:nonceLen], raw[nonceLen:], ad)
	if err != nil {
		return nil, "", ErrReferenceInvalid
	}
	return plain, key.id, nil
}

// errBadRevision: a revision is 64 lowercase hex characters.
var errBadRevision = errors.New("want 64 lowercase hex characters")

// lowerHex[c] is the value of the lowercase hex digit c, or 0xff.
var lowerHex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range hexDigits {
		t[c] = byte(i)
	}
	return t
}()

func decodeRevision(s string) ([32]byte, error) {
	var out [32]byte
	if len(s) != 64 {
		return out, errBadRevision
	}
	for i := range out {
		hi, lo := lowerHex[s[2*i]], lowerHex[s[2*i+1]]
		if hi|lo > 0xf {
			return [32]byte{}, errBadRevision
		}
		out[i] = hi<<4 | lo
	}
	return out, nil
}
