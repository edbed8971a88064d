package knowledge

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"
)

// FuzzOpenTampered: every edit of a sealed ref or cursor — one byte
// replaced, inserted or deleted, the token cut or extended — is refused
// with ErrReferenceInvalid unless the edit gives back a token this keyring
// sealed (the primary key's or the still-accepted old key's), and then its
// claims are exactly the sealed ones. The seeds are edits, not tokens (the
// key is random per run), so the committed corpus stays meaningful.
func FuzzOpenTampered(f *testing.F) {
	sec := make([]byte, 32)
	rand.Read(sec)
	fz := "fz:" + base64.StdEncoding.EncodeToString(sec)
	old := "old:" + secret('o')
	k := mustKeyring(f, fz+","+old, "")
	kOld := mustKeyring(f, old+","+fz, "") // seals with "old", which k still opens

	rc := sampleClaims()
	ref, _ := k.SealRef(rc)
	oldRef, _ := kOld.SealRef(rc)
	cc := CursorClaims{Expiry: t0, RefDigest: RefDigest(ref), NextOffset: 4096, Served: 4096}
	cur, _ := k.SealCursor(cc)
	oldCur, _ := kOld.SealCursor(cc)
	refs := map[string]RefClaims{ref: withKeyID(rc, "fz"), oldRef: withKeyID(rc, "old")}
	curs := map[string]CursorClaims{cur: withCursorKeyID(cc, "fz"), oldCur: withCursorKeyID(cc, "old")}
	tokens := []string{ref, oldRef, cur, oldCur}

	for _, s := range []struct {
		which, op uint8
		pos       uint16
		b         byte
	}{
		{0, 0, 0, 'x'}, {0, 0, 3, '.'}, {0, 0, 4, 'o'}, {0, 0, 20, 'A'}, {0, 0, 65535, 'B'}, {1, 0, 5, 'f'},
		{2, 1, 0, ' '}, {2, 1, 65535, '='}, {3, 2, 2, 0}, {0, 2, 65535, 0}, {1, 3, 40, 0}, {2, 4, 0, '-'},
		{3, 0, 65534, '_'}, {0, 5, 0, 0}, {0, 0, 7, 0xff},
	} {
		f.Add(s.which, s.op, s.pos, s.b)
	}
	f.Fuzz(func(t *testing.T, which, op uint8, pos uint16, b byte) {
		tok := []byte(tokens[int(which)%len(tokens)])
		i := int(pos) % (len(tok) + 1)
		var s []byte
		switch op % 6 {
		case 0: // replace
			s = append([]byte(nil), tok...)
			if i == len(s) {
				i--
			}
			s[i] = b
		case 1: // insert
			s = append(append(append([]byte(nil), tok[:i]...), b), tok[i:]...)
		case 2: // delete
			if i == len(tok) {
				i--
			}
			s = append(append([]byte(nil), tok[:i]...), tok[i+1:]...)
		case 3: // cut
			s = tok[:i]
		case 4: // extend
			s = append(append([]byte(nil), tok...), b)
		case 5: // unchanged: the sealed tokens themselves open
			s = tok
		}
		str := string(s)
		gotRef, err := k.OpenRef(str)
		want, sealed := refs[str]
		checkTampered(t, "OpenRef", str, sealed, gotRef == want, err)
		gotCur, err := k.OpenCursor(str)
		wantCur, sealedCur := curs[str]
		checkTampered(t, "OpenCursor", str, sealedCur, gotCur == wantCur, err)
	})
}

func checkTampered(t *testing.T, op, s string, sealed, claimsMatch bool, err error) {
	t.Helper()
	switch {
	case err == nil && (!sealed || !claimsMatch):
		t.Fatalf("%s(%q) accepted a token it did not seal, or with other claims", op, s)
	case err != nil && sealed:
		t.Fatalf("%s(%q) refused a sealed token: %v", op, s, err)
	case err != nil && !errors.Is(err, ErrReferenceInvalid):
		t.Fatalf("%s(%q): got %v; want ErrReferenceInvalid", op, s, err)
	}
}

func withKeyID(c RefClaims, id string) RefClaims             { c.KeyID = id; return c }
func withCursorKeyID(c CursorClaims, id string) CursorClaims { c.KeyID = id; return c }
