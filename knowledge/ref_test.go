package knowledge

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func sampleClaims() RefClaims {
	return RefClaims{
		Expiry:        t0.Add(ReferenceTTL),
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
	if len(ref) > MaxTokenLen {
		t.Errorf("ref length %d; want ≤ %d even with the longest key id and kb id", len(ref), MaxTokenLen)
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
	// Refs never carry readable identity or document text.
	raw, _ := base64.RawURLEncoding.DecodeString(ref[len(RefPrefix):])
	for _, s := range []string{"sess-a", "user-42", "app-1", routeKey} {
		if strings.Contains(string(raw), s) {
			t.Errorf("ref payload contains %q; want only its digest", s)
		}
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
	t.Run("cursor MAC'd under the ref key is refused", func(t *testing.T) {
		key := k.keys[0]
		p := appendHeader(nil, kindCursor, key.id, t0)
		p = append(p, make([]byte, 48)...)
		forged := seal(CursorPrefix, key.ref, p)
		if _, err := k.OpenCursor(forged); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("got %v; want invalid", err)
		}
	})
	t.Run("unknown key id", func(t *testing.T) {
		other := mustKeyring(t, "k2:"+strings.Repeat("QUJD", 11), "") // same secret, other id
		forged, _ := other.SealRef(sampleClaims())
		if _, err := k.OpenRef(forged); !errors.Is(err, ErrReferenceInvalid) {
			t.Errorf("got %v; want invalid", err)
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
		for _, s := range []string{"", "knowledge:1", "kr1.", "kr1", "KR1.AAAA", "kr2." + ref[4:], strings.Repeat("A", 600), "kr1." + strings.Repeat("A", 600)} {
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
		// The MAC key is not the raw token (domain separation).
		key := a.keys[0]
		if string(key.ref) == "server-token" || string(key.ref) == string(key.cursor) {
			t.Errorf("ref key equals the token or the cursor key; want derived, distinct keys")
		}
		want := sha256.Size
		if len(key.ref) != want || len(key.cursor) != want {
			t.Errorf("derived key sizes %d/%d; want %d", len(key.ref), len(key.cursor), want)
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
	if _, _, ke := c.call("read", tokA, routeKey, body); ke == nil || ke.Code != CodeReferenceInvalid {
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
	if _, _, ke := removed.call("read", tokA, routeKey, body); ke == nil || ke.Code != CodeReferenceInvalid {
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
	exp := t0.Add(ReferenceTTL)
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
