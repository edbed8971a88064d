package knowledge

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// Domain-separation labels (HKDF info) for the per-purpose AEAD keys (SPEC
// §5, version 2). A cursor is never a valid reference and vice versa because
// they are sealed under different keys. The labels name version 2 so these
// keys never equal the HMAC keys version 1 derived from the same secret.
const (
	refKeyLabel    = "bailing.agent-knowledge.v2/ref"
	cursorKeyLabel = "bailing.agent-knowledge.v2/cursor"

	// CoreTokenKeyID is the key id of the key derived from the Core service
	// token when no explicit signing keys are configured.
	CoreTokenKeyID = "core"

	minSecretBytes = 32
	maxKeyIDLen    = 16
)

// Keyring holds the keys for references and cursors. The first key seals;
// every key opens, picked by the key id written in clear in the token (and
// authenticated as associated data), never by trial. A Keyring is immutable
// and safe for concurrent use.
type Keyring struct {
	keys []signingKey // keys[0] seals
	byID map[string]*signingKey
}

// signingKey is one configured secret as two XChaCha20-Poly1305 instances
// under keys derived per purpose. The derived key bytes are not kept.
type signingKey struct {
	id     string
	ref    cipher.AEAD // seals references
	cursor cipher.AEAD // seals cursors
}

// deriveKey is HKDF-SHA256 (RFC 5869) of secret with label as info: a
// 32-byte key for one purpose.
func deriveKey(secret []byte, label string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, nil, label, chacha20poly1305.KeySize)
}

func newSigningKey(id string, secret []byte) (signingKey, error) {
	k := signingKey{id: id}
	for _, p := range []struct {
		label string
		aead  *cipher.AEAD
	}{{refKeyLabel, &k.ref}, {cursorKeyLabel, &k.cursor}} {
		key, err := deriveKey(secret, p.label)
		if err != nil {
			return signingKey{}, fmt.Errorf("key id %q: deriving a key: %w", id, err)
		}
		if *p.aead, err = chacha20poly1305.NewX(key); err != nil {
			return signingKey{}, fmt.Errorf("key id %q: %w", id, err)
		}
	}
	return k, nil
}

// NewKeyring builds the signing keys.
//
// spec is KNOWLEDGE_SIDECAR_SIGNING_KEYS: "id1:SECRET1,id2:SECRET2", where
// the first key seals and all keys open; an id is 1–16 characters of
// [A-Za-z0-9_-]; a SECRET is base64 (standard or URL alphabet, padded or not)
// of at least 32 bytes. Spaces around entries are ignored.
//
// An empty spec derives a single key with id CoreTokenKeyID from coreToken,
// the sidecar's Core service token ("signed with the existing server token,
// domain-separated"). Both empty is an error. Error messages name entries by
// position and id and never contain secret material.
func NewKeyring(spec, coreToken string) (*Keyring, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		if coreToken == "" {
			return nil, errors.New("no signing keys configured and no core service token to derive one from")
		}
		k, err := newSigningKey(CoreTokenKeyID, []byte(coreToken))
		if err != nil {
			return nil, err
		}
		return newKeyring([]signingKey{k}), nil
	}
	var keys []signingKey
	seen := map[string]bool{}
	var problems []string
	for i, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		id, secret, ok := strings.Cut(entry, ":")
		id = strings.TrimSpace(id)
		switch {
		case entry == "":
			problems = append(problems, fmt.Sprintf("entry %d: empty", i+1))
			continue
		case !ok:
			problems = append(problems, fmt.Sprintf("entry %d: want id:secret", i+1))
			continue
		case !validKeyID(id):
			problems = append(problems, fmt.Sprintf("entry %d: key id must be 1-%d characters of [A-Za-z0-9_-]", i+1, maxKeyIDLen))
			continue
		case seen[id]:
			problems = append(problems, fmt.Sprintf("entry %d: duplicate key id %q", i+1, id))
			continue
		}
		seen[id] = true
		raw, err := decodeSecret(strings.TrimSpace(secret))
		if err != nil {
			problems = append(problems, fmt.Sprintf("entry %d (key id %q): secret must be base64 of at least %d bytes", i+1, id, minSecretBytes))
			continue
		}
		key, err := newSigningKey(id, raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("entry %d: %v", i+1, err))
			continue
		}
		keys = append(keys, key)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("invalid signing keys: %s", strings.Join(problems, "; "))
	}
	return newKeyring(keys), nil
}

func newKeyring(keys []signingKey) *Keyring {
	kr := &Keyring{keys: keys, byID: make(map[string]*signingKey, len(keys))}
	for i := range kr.keys {
		kr.byID[kr.keys[i].id] = &kr.keys[i]
	}
	return kr
}

// SigningKeyID is the id of the key that seals new references and cursors.
func (k *Keyring) SigningKeyID() string { return k.keys[0].id }

// KeyIDs lists the ids of all keys that open tokens, the sealing key first.
func (k *Keyring) KeyIDs() []string {
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.id
	}
	return ids
}

func validKeyID(id string) bool {
	if len(id) < 1 || len(id) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func decodeSecret(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty secret")
	}
	encs := []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding}
	for _, enc := range encs {
		raw, err := enc.DecodeString(s)
		if err == nil {
			if len(raw) < minSecretBytes {
				return nil, errors.New("secret too short")
			}
			return raw, nil
		}
	}
	return nil, errors.New("secret is not base64")
}
