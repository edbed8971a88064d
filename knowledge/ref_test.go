package knowledge

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

func sampleClaims() RefClaims {
	return RefClaims{
		Expiry:        t0.Add(protocol.ReferenceTTL),
		Binding:       Binding{ClientAppID: "app-1", SessionID: "sess-a", PrincipalID: "user-42", OnBehalfOf: "t7:user-42", Route: routeKey, RunID: runA}.Digest(),
		ScopeRevision: strings.Repeat("ab", 32),
		DocRevision:   strings.Repeat("cd", 32),
		DocID:         9_007_199_254_740_993,
		KBID:          strings.Repeat("k", 64),
	}
}

func mustKeyring(t testing.TB, spec, token string) *Keyring {
	t.Helper()
	k, err := NewKeyring(spec, token)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func secret(b byte) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), 32)))
}

func TestRefRoundTripAndShape(t *testing.T) {
	k := mustKeyring(t, "a-very-long-id16:"+secret('x'), "")
	c := sampleClaims()
	ref, err := k.SealRef(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, RefPrefix) {
		t.Errorf("ref %q; want prefix %q", ref, RefPrefix)
	}
	if len(ref) > protocol.MaxTokenBytes {
		t.Errorf("ref length %d; want ≤ %d even with the longest key id and kb id", len(ref), protocol.MaxTokenBytes)
	}
	if strings.ContainsAny(ref[len(RefPrefix):], "+/=") {
		t.Errorf("ref %q; want unpadded base64url", ref)
	}
	got, err := k.OpenRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	c.KeyID = "a-very-long-id16"
	if got != c {
		t.Errorf("OpenRef got %+v; want %+v", got, c)
	}
	cur, err := k.SealCursor(CursorClaims{Expiry: t0, RefDigest: RefDigest(ref), NextOffset: 1 << 40, Served: 131072})
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) != k.cursorLen() || !strings.HasPrefix(cur, CursorPrefix) {
		t.Errorf("cursor %q (len %d); want prefix %q and len %d", cur, len(cur), CursorPrefix, k.cursorLen())
	}
	cc, err := k.OpenCursor(cur)
	if err != nil || cc.NextOffset != 1<<40 || cc.Served != 131072 || cc.RefDigest != RefDigest(ref) || !cc.Expiry.Equal(t0) {
		t.Errorf("OpenCursor got %+v, %v; want the sealed claims", cc, err)
	}
	// Only the prefix, the key id and the ciphertext are visible.
	parts := strings.Split(ref, ".")
	if len(parts) != 3 || parts[0]+"." != RefPrefix || parts[1] != "a-very-long-id16" {
		t.Errorf("ref parts %q; want [kr2 a-very-long-id16 <ciphertext>]", parts)
	}
	// A random nonce per token: the same claims never seal to the same
	// string, and both open.
	again, _ := k.SealRef(sampleClaims())
	if again == ref {
		t.Errorf("two seals of the same claims are equal; want a fresh nonce each")
	}
	if got, err := k.OpenRef(again); err != nil || got != c {
		t.Errorf("second seal: got %+v, %v; want the claims", got, err)
	}
}

// opacityNeedles are the values a reference binds that Core never shows an
// Agent token, in every form a reader could look for them.
func opacityNeedles(b Binding, c RefClaims) map[string][]byte {
	digest := b.Digest()
	return map[string][]byte{
		"kb id":             []byte(c.KBID),
		"doc id (decimal)":  []byte(strconv.FormatInt(c.DocID, 10)),
		"doc id (binary)":   binary.BigEndian.AppendUint64(nil, uint64(c.DocID)),
		"route":             []byte(b.Route),
		"session id":        []byte(b.SessionID),
		"principal id":      []byte(b.PrincipalID),
		"on_behalf_of":      []byte(b.OnBehalfOf),
		"client app id":     []byte(b.ClientAppID),
		"run id":            []byte(b.RunID),
		"binding digest":    digest[:],
		"binding digest 8B": digest[:8],
	}
}

// leaks lists the needles visible in tok: in the string itself, or in the
// base64 decoding (URL or standard alphabet, padded or not, as far as it
// decodes) of any of its dot-separated parts.
func leaks(tok string, needles map[string][]byte) []string {
	views := [][]byte{[]byte(tok)}
	for _, part := range strings.Split(tok, ".") {
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
			buf := make([]byte, enc.DecodedLen(len(part)))
			n, _ := enc.Decode(buf, []byte(part))
			views = append(views, buf[:n])
		}
	}
	var found []string
	for name, needle := range needles {
		for _, v := range views {
			if bytes.Contains(v, needle) {
				found = append(found, name)
				break
			}
		}
	}
	slices.Sort(found)
	return found
}

// TestRefIsOpaque: base64-decoding every part of a reference shows none of
// the KB id, document id, route, session, principal, client app or run it
// binds. The same check finds them in a version 1 reference, so it can fail.
func TestRefIsOpaque(t *testing.T) {
	k := mustKeyring(t, "k1:"+secret('x'), "")
	b := Binding{ClientAppID: "app-opaque-7", SessionID: "sess-opaque-8", PrincipalID: "user-opaque-9",
		OnBehalfOf: "tenant-opaque:user-opaque-9", Route: "order-assistant", RunID: runA}
	c := RefClaims{
		Expiry: t0.Add(protocol.ReferenceTTL), Binding: b.Digest(),
		ScopeRevision: strings.Repeat("ab", 32), DocRevision: strings.Repeat("cd", 32),
		DocID: 4_242_424_242, KBID: "kb-opaque-faq",
	}
	needles := opacityNeedles(b, c)
	for i := 0; i < 200; i++ { // many nonces
		ref, err := k.SealRef(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := leaks(ref, needles); len(got) > 0 {
			t.Fatalf("ref %s shows %v; want nothing", ref, got)
		}
	}
	v1 := sealV1Ref([]byte(strings.Repeat("x", 32)), "k1", c)
	if got, want := leaks(v1, needles), []string{"binding digest", "binding digest 8B", "doc id (binary)", "kb id"}; !slices.Equal(got, want) {
		t.Errorf("version 1 ref shows %v; want %v (the check must see a readable payload)", got, want)
	}
}

// TestTokenLengthWorstCase: the longest key id, KB id and document id keep
// references and cursors within protocol.MaxTokenBytes, at the lengths maxRefLen and
// cursorLen promise.
func TestTokenLengthWorstCase(t *testing.T) {
	k := mustKeyring(t, strings.Repeat("Z", maxKeyIDLen)+":"+secret('w'), "")
	c := sampleClaims()
	c.KBID = strings.Repeat("\xff", maxKBIDLen)
	c.DocID = 1<<63 - 1
	c.Expiry = time.Unix(1<<62, 0)
	if got, want := maxRefLen, tokenLen(RefPrefix, maxKeyIDLen, refFixedLen+maxKBIDLen); got != want {
		t.Fatalf("maxRefLen %d; want %d", got, want)
	}
	for i := 0; i < 50; i++ {
		ref, err := k.SealRef(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(ref) != maxRefLen || len(ref) > protocol.MaxTokenBytes {
			t.Fatalf("longest ref is %d bytes; want %d and ≤ %d", len(ref), maxRefLen, protocol.MaxTokenBytes)
		}
		cur, err := k.SealCursor(CursorClaims{Expiry: c.Expiry, RefDigest: RefDigest(ref), NextOffset: 1<<63 - 1, Served: 1<<63 - 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(cur) != k.cursorLen() || len(cur) > protocol.MaxTokenBytes {
			t.Fatalf("longest cursor is %d bytes; want %d and ≤ %d", len(cur), k.cursorLen(), protocol.MaxTokenBytes)
		}
		if got, err := k.OpenRef(ref); err != nil || got.KBID != c.KBID || got.DocID != c.DocID {
			t.Fatalf("longest ref: got %+v, %v; want its claims", got, err)
		}
	}
}

// sealV1Ref builds a version 1 reference exactly as the previous codec did
// (readable payload, HMAC-SHA256 under the v1 label), to prove such tokens
// are refused after the upgrade and to give the opacity check a token it
// must flag.
func sealV1Ref(secret []byte, keyID string, c RefClaims) string {
	scope, _ := decodeRevision(c.ScopeRevision)
	rev, _ := decodeRevision(c.DocRevision)
	p := []byte{1, 'R', byte(len(keyID))}
	p = append(p, keyID...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.Expiry.Unix()))
	p = append(p, c.Binding[:]...)
	p = append(p, scope[:]...)
	p = append(p, rev[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.DocID))
	p = append(p, byte(len(c.KBID)))
	p = append(p, c.KBID...)
	return "kr1." + base64.RawURLEncoding.EncodeToString(v1MAC(secret, "bailing.agent-knowledge.v1/ref", p))
}

// sealV1Cursor is sealV1Ref for a version 1 cursor.
func sealV1Cursor(secret []byte, keyID string, c CursorClaims) string {
	p := []byte{1, 'C', byte(len(keyID))}
	p = append(p, keyID...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.Expiry.Unix()))
	p = append(p, c.RefDigest[:]...)
	p = binary.BigEndian.AppendUint64(p, uint64(c.NextOffset))
	p = binary.BigEndian.AppendUint64(p, uint64(c.Served))
	return "kc1." + base64.RawURLEncoding.EncodeToString(v1MAC(secret, "bailing.agent-knowledge.v1/cursor", p))
}

func v1MAC(secret []byte, label string, payload []byte) []byte {
	d := hmac.New(sha256.New, secret)
	d.Write([]byte(label))
	m := hmac.New(sha256.New, d.Sum(nil))
	m.Write(payload)
	return m.Sum(payload)
}

func TestVersion1Refused(t *testing.T) {
	raw := []byte(strings.Repeat("x", 32))
	k := mustKeyring(t, "k1:"+base64.StdEncoding.EncodeToString(raw), "")
	core := mustKeyring(t, "", "server-token")
	c := sampleClaims()
	cc := CursorClaims{Expiry: t0, RefDigest: RefDigest("kr1.x"), NextOffset: 10, Served: 10}
	tests := []struct {
		name string
		keys *Keyring
		tok  string
	}{
		{"v1 ref, configured key", k, sealV1Ref(raw, "k1", c)},
		{"v1 ref, core token key", core, sealV1Ref([]byte("server-token"), CoreTokenKeyID, c)},
		{"v1 cursor, configured key", k, sealV1Cursor(raw, "k1", cc)},
		{"v1 cursor, core token key", core, sealV1Cursor([]byte("server-token"), CoreTokenKeyID, cc)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.keys.OpenRef(tc.tok); !errors.Is(err, ErrReferenceInvalid) {
				t.Errorf("OpenRef: got %v; want ErrReferenceInvalid", err)
			}
			if _, err := tc.keys.OpenCursor(tc.tok); !errors.Is(err, ErrReferenceInvalid) {
				t.Errorf("OpenCursor: got %v; want ErrReferenceInvalid", err)
			}
			// Nor under a version 2 prefix.
			for _, p := range []string{RefPrefix, CursorPrefix} {
				v2 := p + tc.keys.SigningKeyID() + "." + tc.tok[4:]
				if _, err := tc.keys.OpenRef(v2); !errors.Is(err, ErrReferenceInvalid) {
					t.Errorf("OpenRef(%.12s…): got %v; want ErrReferenceInvalid", v2, err)
				}
				if _, err := tc.keys.OpenCursor(v2); !errors.Is(err, ErrReferenceInvalid) {
					t.Errorf("OpenCursor(%.12s…): got %v; want ErrReferenceInvalid", v2, err)
				}
			}
		})
	}
}

func TestSealRefRejectsBadClaims(t *testing.T) {
	k := testKeys(t)
	for name, edit := range map[string]func(c *RefClaims){
		"scope not hex":   func(c *RefClaims) { c.ScopeRevision = "xyz" },
		"rev uppercase":   func(c *RefClaims) { c.DocRevision = strings.Repeat("AB", 32) },
		"doc id zero":     func(c *RefClaims) { c.DocID = 0 },
		"kb id empty":     func(c *RefClaims) { c.KBID = "" },
		"kb id too long":  func(c *RefClaims) { c.KBID = strings.Repeat("k", 129) },
		"doc id negative": func(c *RefClaims) { c.DocID = -4 },
	} {
		t.Run(name, func(t *testing.T) {
			c := sampleClaims()
			edit(&c)
			if _, err := k.SealRef(c); err == nil {
				t.Fatalf("got nil error; want one")
			}
		})
	}
	if _, err := k.SealCursor(CursorClaims{NextOffset: -1}); err == nil {
		t.Fatalf("negative cursor offset: got nil error; want one")
	}
}

// TestTamper: every byte flipped, every truncation, wrong key id, wrong
// kind, appended bytes: always ErrReferenceInvalid, never a panic.
func TestTamper(t *testing.T) {
	k := testKeys(t)
	ref, _ := k.SealRef(sampleClaims())
	cur, _ := k.SealCursor(CursorClaims{Expiry: t0, RefDigest: RefDigest(ref), NextOffset: 10, Served: 10})
	open := map[string]func(string) error{
		"ref":    func(s string) error { _, err := k.OpenRef(s); return err },
		"cursor": func(s string) error { _, err := k.OpenCursor(s); return err },
	}
	for name, tok := range map[string]string{"ref": ref, "cursor": cur} {
		t.Run(name, func(t *testing.T) {
			check := open[name]
			if err := check(tok); err != nil {
				t.Fatalf("untouched: got %v; want nil", err)
			}
			for i := 0; i < len(tok); i++ {
				for _, mask := range []byte{0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80} {
					b := []byte(tok)
					b[i] ^= mask
					if err := check(string(b)); !errors.Is(err, ErrReferenceInvalid) {
						t.Fatalf("byte %d ^ %#x: got %v; want ErrReferenceInvalid", i, mask, err)
					}
				}
			}
			for n := 0; n < len(tok); n++ {
				if err := check(tok[:n]); !errors.Is(err, ErrReferenceInvalid) {
					t.Fatalf("truncated to %d: got %v; want ErrReferenceInvalid", n, err)
				}
			}
			for _, suffix := range []string{"A", "AA", "AAAA", "=", "\n"} {
				if err := check(tok + suffix); !errors.Is(err, ErrReferenceInvalid) {
					t.Fatalf("appended %q: got %v; want ErrReferenceInvalid", suffix, err)
				}
			}
		})
	}
	t.Run("kinds do not cross", func(t *testing.T) {
		if _, err := k.OpenRef(cur); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("cursor as ref: got %v; want invalid", err)
		}
		if _, err := k.OpenCursor(ref); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("ref as cursor: got %v; want invalid", err)
		}
		// Same bytes under the other prefix: the kind byte and the
		// per-purpose key both refuse it.
		if _, err := k.OpenRef(RefPrefix + cur[len(CursorPrefix):]); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("cursor re-prefixed as ref: got %v; want invalid", err)
		}
		if _, err := k.OpenCursor(CursorPrefix + ref[len(RefPrefix):]); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("ref re-prefixed as cursor: got %v; want invalid", err)
		}
	})
	t.Run("wrong purpose key is refused", func(t *testing.T) {
		key := k.keys[0]
		// A well-formed cursor plaintext sealed under the ref key, and a
		// ref plaintext under the cursor key, each with the right prefix.
		forgedCur := sealToken(CursorPrefix, key.id, key.ref, make([]byte, cursorPlainLen))
		if _, err := k.OpenCursor(forgedCur); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("cursor under the ref key: got %v; want invalid", err)
		}
		p := make([]byte, refFixedLen+1)
		p[refFixedLen-1] = 1 // doc id 1
		forgedRef := sealToken(RefPrefix, key.id, key.cursor, p)
		if _, err := k.OpenRef(forgedRef); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("ref under the cursor key: got %v; want invalid", err)
		}
		// The control: the same plaintext under the right key opens.
		if _, err := k.OpenRef(sealToken(RefPrefix, key.id, key.ref, p)); err != nil {
			t.Errorf("ref under the ref key: got %v; want nil", err)
		}
	})
	t.Run("unknown key id", func(t *testing.T) {
		other := mustKeyring(t, "k2:"+strings.Repeat("QUJD", 11), "") // same secret, other id
		forged, _ := other.SealRef(sampleClaims())
		if _, err := k.OpenRef(forged); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("got %v; want invalid", err)
		}
	})
	t.Run("key id is authenticated", func(t *testing.T) {
		// Two configured ids with the same secret derive the same AEAD key;
		// only the associated data tells them apart.
		both := mustKeyring(t, "k1:"+strings.Repeat("QUJD", 11)+",k2:"+strings.Repeat("QUJD", 11), "")
		relabeled := RefPrefix + "k2" + ref[len(RefPrefix)+len("k1"):]
		if _, err := both.OpenRef(ref); err != nil {
			t.Fatalf("control: got %v; want nil", err)
		}
		if _, err := both.OpenRef(relabeled); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("key id k1 rewritten to k2: got %v; want invalid", err)
		}
	})
	t.Run("same id other secret", func(t *testing.T) {
		other := mustKeyring(t, "k1:"+secret('z'), "")
		forged, _ := other.SealRef(sampleClaims())
		if _, err := k.OpenRef(forged); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("got %v; want invalid", err)
		}
	})
	t.Run("legacy and junk", func(t *testing.T) {
		for _, s := range []string{"", "knowledge:1", "kr1.", "kr1", "KR1.AAAA", "kr1." + ref[4:], "kr3." + ref[4:], "KR2." + ref[4:],
			"kr2.", "kr2.k1", "kr2.k1.", "kr2..AAAA", "kr2.k1..AAAA", "kr2.k1.AAAA", "kr2." + strings.Repeat("k", 17) + ".AAAA",
			ref + ".", strings.Replace(ref, ".", "..", 1), strings.Repeat("A", 600), "kr2.k1." + strings.Repeat("A", 600)} {
			if _, err := k.OpenRef(s); !errors.Is(err, ErrReferenceInvalid) {
				t.Errorf("%.20q: got %v; want invalid", s, err)
			}
		}
	})
}

func TestKeyRotation(t *testing.T) {
	oldOnly := mustKeyring(t, "old:"+secret('o'), "")
	rotated := mustKeyring(t, "new:"+secret('n')+", old:"+secret('o'), "")
	newOnly := mustKeyring(t, "new:"+secret('n'), "")
	oldRef, _ := oldOnly.SealRef(sampleClaims())
	newRef, _ := rotated.SealRef(sampleClaims())

	if got, err := rotated.OpenRef(oldRef); err != nil || got.KeyID != "old" {
		t.Errorf("rotated keyring opening old ref: got %+v, %v; want key old", got.KeyID, err)
	}
	if got, _ := rotated.OpenRef(newRef); got.KeyID != "new" {
		t.Errorf("rotated keyring signs with %q; want new", got.KeyID)
	}
	if rotated.SigningKeyID() != "new" || strings.Join(rotated.KeyIDs(), ",") != "new,old" {
		t.Errorf("got signing %q ids %v; want new, [new old]", rotated.SigningKeyID(), rotated.KeyIDs())
	}
	if _, err := newOnly.OpenRef(oldRef); !errors.Is(err, ErrReferenceInvalid) {
		t.Errorf("removed key: got %v; want invalid", err)
	}
	if _, err := oldOnly.OpenRef(newRef); !errors.Is(err, ErrReferenceInvalid) {
		t.Errorf("old replica reading new key: got %v; want invalid", err)
	}
}

func TestNewKeyring(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef\xff\xfe")
	tests := []struct {
		name, spec, token string
		ok                bool
		wantID            string
	}{
		{"core token only", "", "server-token", true, CoreTokenKeyID},
		{"spaces are empty", "   ", "server-token", true, CoreTokenKeyID},
		{"std padded", "a:" + base64.StdEncoding.EncodeToString(raw), "", true, "a"},
		{"std raw", "a:" + base64.RawStdEncoding.EncodeToString(raw), "", true, "a"},
		{"url padded", "a:" + base64.URLEncoding.EncodeToString(raw), "", true, "a"},
		{"url raw", "a:" + base64.RawURLEncoding.EncodeToString(raw), "", true, "a"},
		{"explicit keys win over token", "k_1-X:" + secret('s'), "server-token", true, "k_1-X"},
		{"two keys with spaces", " a:" + secret('a') + " , b:" + secret('b') + " ", "", true, "a"},
		{"both empty", "", "", false, ""},
		{"short secret", "a:" + base64.StdEncoding.EncodeToString([]byte("short-secret-31-bytes-long-xxxx")), "", false, ""},
		{"not base64", "a:not*base64*at*all*not*base64*at*all*!!", "", false, ""},
		{"missing colon", "a" + secret('a'), "", false, ""},
		{"empty id", ":" + secret('a'), "", false, ""},
		{"id too long", strings.Repeat("i", 17) + ":" + secret('a'), "", false, ""},
		{"id bad char", "a.b:" + secret('a'), "", false, ""},
		{"duplicate id", "a:" + secret('a') + ",a:" + secret('b'), "", false, ""},
		{"empty entry", "a:" + secret('a') + ",,b:" + secret('b'), "", false, ""},
		{"empty secret", "a:", "", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyring(tc.spec, tc.token)
			if !tc.ok {
				if err == nil {
					t.Fatalf("got nil error; want one")
				}
				_, sec, _ := strings.Cut(tc.spec, ":")
				sec = strings.TrimSpace(strings.Split(sec, ",")[0])
				if len(sec) > 4 && strings.Contains(err.Error(), sec) {
					t.Fatalf("error %q contains the secret", err)
				}
				if tc.token != "" && strings.Contains(err.Error(), tc.token) {
					t.Fatalf("error %q contains the token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v; want nil", err)
			}
			if k.SigningKeyID() != tc.wantID {
				t.Fatalf("signing key %q; want %q", k.SigningKeyID(), tc.wantID)
			}
		})
	}
	t.Run("core token keys are domain separated and token-bound", func(t *testing.T) {
		a := mustKeyring(t, "", "server-token")
		b := mustKeyring(t, "", "server-token")
		c := mustKeyring(t, "", "other-token")
		ref, _ := a.SealRef(sampleClaims())
		if _, err := b.OpenRef(ref); err != nil {
			t.Errorf("same token: got %v; want nil", err)
		}
		if _, err := c.OpenRef(ref); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("other token: got %v; want invalid", err)
		}
		// The AEAD keys are derived per purpose, differ from the token and
		// from the version 1 HMAC keys of the same secret.
		token := []byte("server-token")
		refKey, err1 := deriveKey(token, refKeyLabel)
		curKey, err2 := deriveKey(token, cursorKeyLabel)
		if err1 != nil || err2 != nil || len(refKey) != 32 || len(curKey) != 32 {
			t.Fatalf("derived keys %d/%d bytes, %v %v; want 32 bytes each", len(refKey), len(curKey), err1, err2)
		}
		v1Ref := v1MAC(token, "bailing.agent-knowledge.v1/ref", nil)
		v1Cur := v1MAC(token, "bailing.agent-knowledge.v1/cursor", nil)
		for name, other := range map[string][]byte{"token": token, "cursor key": curKey, "v1 ref key": v1Ref, "v1 cursor key": v1Cur} {
			if bytes.Equal(refKey, other) || (name != "cursor key" && bytes.Equal(curKey, other)) {
				t.Errorf("a derived key equals the %s; want distinct keys", name)
			}
		}
	})
}

// TestReplicasShareKeys: two Services with the same keys accept each
// other's refs and cursors; a Service with other keys does not.
func TestReplicasShareKeys(t *testing.T) {
	a := newEnv(t)
	b := newEnv(t)
	c := newEnv(t, func(o *Options) { o.Keys = mustKeyring(t, "k9:"+secret('q'), "") })
	ref := a.refFor(tokA, routeKey, "", docRefund)
	body := `{"ref":"` + ref + `"}`
	if _, _, ke := b.call("read", tokA, routeKey, body); ke != nil {
		t.Fatalf("replica with the same keys: got %v; want success", ke)
	}
	if _, _, ke := c.call("read", tokA, routeKey, body); ke == nil || ke.Code != protocol.CodeReferenceInvalid {
		t.Fatalf("replica with other keys: got %v; want knowledge_reference_invalid", ke)
	}
}

// TestRotationThroughService: refs from before a rotation still read while
// the old key verifies, and fail as invalid once it is removed.
func TestRotationThroughService(t *testing.T) {
	oldSpec := "old:" + secret('o')
	a := newEnv(t, func(o *Options) { o.Keys = mustKeyring(t, oldSpec, "") })
	ref := a.refFor(tokA, routeKey, "", docRefund)
	body := `{"ref":"` + ref + `"}`
	rotated := newEnv(t, func(o *Options) { o.Keys = mustKeyring(t, "new:"+secret('n')+","+oldSpec, "") })
	if _, _, ke := rotated.call("read", tokA, routeKey, body); ke != nil {
		t.Fatalf("after rotation: got %v; want success", ke)
	}
	removed := newEnv(t, func(o *Options) { o.Keys = mustKeyring(t, "new:"+secret('n'), "") })
	if _, _, ke := removed.call("read", tokA, routeKey, body); ke == nil || ke.Code != protocol.CodeReferenceInvalid {
		t.Fatalf("after removal: got %v; want knowledge_reference_invalid", ke)
	}
}

func TestBindingDigestSeparatesFields(t *testing.T) {
	base := Binding{ClientAppID: "a", SessionID: "b", PrincipalID: "c", OnBehalfOf: "d", Route: "e", RunID: ""}
	variants := []Binding{
		{ClientAppID: "ab", SessionID: "", PrincipalID: "c", OnBehalfOf: "d", Route: "e"},
		{ClientAppID: "a", SessionID: "b", PrincipalID: "c", OnBehalfOf: "d", Route: "e", RunID: runA},
		{ClientAppID: "a", SessionID: "b", PrincipalID: "cd", OnBehalfOf: "", Route: "e"},
		{ClientAppID: "a", SessionID: "b", PrincipalID: "c", OnBehalfOf: "d", Route: "f"},
	}
	for i, v := range variants {
		if v.Digest() == base.Digest() {
			t.Errorf("variant %d has the same digest as the base; want different", i)
		}
	}
}

func TestExpiryBoundary(t *testing.T) {
	exp := t0.Add(protocol.ReferenceTTL)
	tests := []struct {
		now  time.Time
		want bool
	}{
		{t0, false},
		{exp, false},
		{exp.Add(999 * time.Millisecond), false},
		{exp.Add(time.Second), true},
	}
	for _, tc := range tests {
		if got := expired(exp, tc.now); got != tc.want {
			t.Errorf("expired(now=%s) = %v; want %v", tc.now.Sub(t0), got, tc.want)
		}
	}
}

// FuzzOpen: opening any string never panics, fails only with
// ErrReferenceInvalid, and accepts nothing but the tokens this process
// sealed (the key is random per run, so no stored input can be valid).
func FuzzOpen(f *testing.F) {
	sec := make([]byte, 32)
	rand.Read(sec)
	k := mustKeyring(f, "fz:"+base64.StdEncoding.EncodeToString(sec)+",old:"+secret('o'), "")
	rc := sampleClaims()
	ref, _ := k.SealRef(rc)
	cc := CursorClaims{Expiry: t0, RefDigest: RefDigest(ref), NextOffset: 4096, Served: 4096}
	cur, _ := k.SealCursor(cc)
	rc.KeyID, cc.KeyID = "fz", "fz"
	for _, s := range []string{ref, cur, ref[:len(ref)-1], cur + "A", "", "kr2.", "kc2.fz.", "kr2.fz." + strings.Repeat("A", 300),
		"kc2.old." + strings.Repeat("_", 128), sealV1Ref(sec, "fz", rc), sealV1Cursor(sec, "fz", cc), "knowledge:1",
		RefPrefix + cur[len(CursorPrefix):], CursorPrefix + ref[len(RefPrefix):]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		gotRef, err := k.OpenRef(s)
		checkOpened(t, "OpenRef", s, ref, gotRef, rc, err)
		gotCur, err := k.OpenCursor(s)
		checkOpened(t, "OpenCursor", s, cur, gotCur, cc, err)
	})
}

// checkOpened fails unless opening s accepted exactly the sealed token tok
// with its claims, and refused everything else with ErrReferenceInvalid.
func checkOpened[C comparable](t *testing.T, op, s, tok string, got, want C, err error) {
	t.Helper()
	switch {
	case err == nil && (s != tok || got != want):
		t.Fatalf("%s(%q) accepted %+v; want only the sealed token", op, s, got)
	case err != nil && (!errors.Is(err, ErrReferenceInvalid) || s == tok):
		t.Fatalf("%s(%q): got %v; want nil for the sealed token, else ErrReferenceInvalid", op, s, err)
	}
}

func TestDecodeRevision(t *testing.T) {
	valid := "0123456789abcdef" + strings.Repeat("f0", 24)
	got, err := decodeRevision(valid)
	if err != nil || hex.EncodeToString(got[:]) != valid {
		t.Fatalf("decodeRevision(%q) = %x, %v; want the same bytes", valid, got, err)
	}
	for i := 0; i < len(valid); i++ {
		for _, c := range []byte{'A', 'F', 'g', 'G', '/', ':', '`', ' ', 0, 0xff} {
			b := []byte(valid)
			b[i] = c
			if _, err := decodeRevision(string(b)); err == nil {
				t.Fatalf("character %q at %d: got nil error; want one", c, i)
			}
		}
	}
	for _, s := range []string{"", valid[:63], valid + "0", valid[:62] + "é"} {
		if _, err := decodeRevision(s); err == nil {
			t.Errorf("decodeRevision(%q): got nil error; want one", s)
		}
	}
}
