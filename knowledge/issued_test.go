package knowledge

import (
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestIssuedHere: a read body whose ref (and cursor, when given) this
// sidecar issued and which has not expired is the sidecar's; anything else
// (a native Core's ref, a forged or foreign token, another ref's cursor,
// an expired one, a malformed body) is not.
func TestIssuedHere(t *testing.T) {
	e := newEnv(t)
	ref := e.refFor(tokA, routeKey, "", docRefund)
	cursor, err := e.svc.keys.SealCursor(CursorClaims{
		Expiry: e.clock.Now().Add(protocol.ReferenceTTL), RefDigest: RefDigest(ref), NextOffset: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	other := e.refFor(tokA, routeKey, "", docShip)
	foreignKeys, err := NewKeyring("k1:"+strings.Repeat("WFla", 11), "")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := foreignKeys.SealRef(RefClaims{
		Expiry: e.clock.Now().Add(time.Minute), ScopeRevision: strings.Repeat("a", 64),
		DocRevision: strings.Repeat("b", 64), DocID: 1, KBID: "faq",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"ref", `{"ref":"` + ref + `"}`, true},
		{"ref and cursor", `{"ref":"` + ref + `","cursor":"` + cursor + `","max_bytes":4096}`, true},
		{"null cursor", `{"ref":"` + ref + `","cursor":null}`, true},
		{"cursor of another ref", `{"ref":"` + other + `","cursor":"` + cursor + `"}`, false},
		{"native ref", `{"ref":"nk1.opaque-core-reference"}`, false},
		{"foreign key, same key id", `{"ref":"` + foreign + `"}`, false},
		{"tampered", `{"ref":"` + ref[:len(ref)-2] + "AA" + `"}`, false},
		{"cursor as ref", `{"ref":"` + cursor + `"}`, false},
		{"ref as cursor", `{"ref":"` + ref + `","cursor":"` + ref + `"}`, false},
		{"empty cursor", `{"ref":"` + ref + `","cursor":""}`, false},
		{"not JSON", `{"ref":"` + ref, false},
		{"ref not a string", `{"ref":1,"x":"` + ref + `"}`, false},
		{"too large", `{"ref":"` + ref + `","pad":"` + strings.Repeat("x", protocol.MaxRequestBytes) + `"}`, false},
	} {
		if got := e.svc.IssuedHere([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: IssuedHere %v; want %v", tc.name, got, tc.want)
		}
	}
	if !e.svc.IssuedRef(ref, "") || !e.svc.IssuedRef(ref, cursor) || e.svc.IssuedRef(other, cursor) || e.svc.IssuedRef(foreign, "") {
		t.Errorf("IssuedRef disagrees with IssuedHere")
	}
	// Served until it expires (valid through its expiry second), not after.
	body := []byte(`{"ref":"` + ref + `","cursor":"` + cursor + `"}`)
	e.clock.Advance(protocol.ReferenceTTL)
	if !e.svc.IssuedHere(body) {
		t.Errorf("at the expiry second: not the sidecar's; want it served until it expires")
	}
	e.clock.Advance(time.Second)
	if e.svc.IssuedHere(body) {
		t.Errorf("after expiry: still the sidecar's")
	}
}
