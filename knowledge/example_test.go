package knowledge_test

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// A reference is sealed for one identity and document and opened again by
// any replica holding the same keys.
func ExampleKeyring_SealRef() {
	keys, err := knowledge.NewKeyring("2026a:"+strings.Repeat("c2VjcmV0", 6), "")
	if err != nil {
		panic(err)
	}
	issued := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	bind := knowledge.Binding{ClientAppID: "app-1", SessionID: "sess-a", PrincipalID: "user-42",
		OnBehalfOf: "t7:user-42", Route: "order-assistant"}
	ref, err := keys.SealRef(knowledge.RefClaims{
		Expiry:        issued.Add(protocol.ReferenceTTL),
		Binding:       bind.Digest(),
		ScopeRevision: strings.Repeat("0", 64),
		DocRevision:   corefacts.Revision("Refunds", "Refund window 0 means no refunds."),
		DocID:         101,
		KBID:          "faq",
	})
	if err != nil {
		panic(err)
	}
	claims, err := keys.OpenRef(ref)
	fmt.Println(strings.HasPrefix(ref, knowledge.RefPrefix), len(ref) <= protocol.MaxTokenBytes, err)
	// Only the prefix and the key id are readable; the rest is ciphertext
	// under a fresh nonce, so sealing again gives another string.
	parts := strings.Split(ref, ".")
	again, _ := keys.SealRef(claims)
	fmt.Println(parts[0], parts[1], len(parts), again != ref)
	fmt.Println(claims.KeyID, claims.KBID, claims.DocID, claims.Expiry.Format(time.RFC3339))
	fmt.Println(claims.Binding == bind.Digest())

	// A flipped bit, a version 1 reference or the old in-turn form
	// are all simply invalid.
	flipped := []byte(ref)
	flipped[len(flipped)-1] ^= 1
	_, err = keys.OpenRef(string(flipped))
	fmt.Println(err)
	_, err = keys.OpenRef("kr1." + ref[len(knowledge.RefPrefix):])
	fmt.Println(err)
	_, err = keys.OpenRef("knowledge:1")
	fmt.Println(err)
	// Output:
	// true true <nil>
	// kr2 2026a 3 true
	// 2026a faq 101 2026-09-01T12:05:00Z
	// true
	// invalid knowledge reference
	// invalid knowledge reference
	// invalid knowledge reference
}

// A cursor continues exactly one reference.
func ExampleKeyring_SealCursor() {
	keys, _ := knowledge.NewKeyring("", "core-service-token")
	ref := "kr2.core.example"
	cur, _ := keys.SealCursor(knowledge.CursorClaims{
		Expiry:     time.Date(2026, 9, 1, 12, 5, 0, 0, time.UTC),
		RefDigest:  knowledge.RefDigest(ref),
		NextOffset: 16000,
		Served:     16000,
	})
	c, err := keys.OpenCursor(cur)
	fmt.Println(strings.HasPrefix(cur, knowledge.CursorPrefix), err, c.KeyID, c.NextOffset)
	fmt.Println(c.RefDigest == knowledge.RefDigest(ref), c.RefDigest == knowledge.RefDigest("kr2.core.other"))
	// Output:
	// true <nil> core 16000
	// true false
}

// FitPrefix measures text as it will appear inside a JSON string.
func ExampleFitPrefix() {
	s := "退款\"ok\"\u2028"
	fmt.Println(knowledge.JSONStringLen(s), string(knowledge.AppendJSONString(nil, s)))
	for _, budget := range []int{2, 3, 6, 8, 12, 18} {
		n, escaped := knowledge.FitPrefix(s, budget)
		fmt.Printf("budget %2d: %q (%d bytes escaped)\n", budget, s[:n], escaped)
	}
	// Output:
	// 20 "退款\"ok\"\u2028"
	// budget  2: "" (0 bytes escaped)
	// budget  3: "退" (3 bytes escaped)
	// budget  6: "退款" (6 bytes escaped)
	// budget  8: "退款\"" (8 bytes escaped)
	// budget 12: "退款\"ok\"" (12 bytes escaped)
	// budget 18: "退款\"ok\"\u2028" (18 bytes escaped)
}

// Fit shortens summaries, then drops the lowest-ranked hints, until the
// whole body fits.
func ExampleSearchBody_Fit() {
	body := knowledge.SearchBody{Route: "order-assistant", ScopeRevision: strings.Repeat("0", 64), Status: protocol.StatusOK}
	for i := 1; i <= 3; i++ {
		body.Hints = append(body.Hints, knowledge.Hint{
			Ref: "kr2.core." + strings.Repeat("A", 300), Title: fmt.Sprintf("Doc %d", i),
			Summary: strings.Repeat("long summary ", 100), Revision: strings.Repeat("f", 64),
			Score: 0.9, ExpiresAt: time.Date(2026, 9, 1, 12, 5, 0, 0, time.UTC),
		})
	}
	body.Fit(protocol.SearchMaxBytes)
	out := body.AppendJSON(nil)
	fmt.Println(len(out) <= protocol.SearchMaxBytes, len(body.Hints), body.Truncated)
	// Output:
	// true 3 true
}

// Plan picks the longest page that keeps the whole read body within
// max_bytes, then AppendJSON writes it.
func ExampleReadPage_Plan() {
	keys, _ := knowledge.NewKeyring("", "core-service-token")
	page := knowledge.ReadPage{
		Route: "order-assistant", ScopeRevision: strings.Repeat("0", 64), Ref: "kr2.core.ref",
		Revision: strings.Repeat("f", 64), Title: "Big", Content: strings.Repeat("数据<&>", 3000),
	}
	cursorLen := len(mustCursor(keys))
	plan, ok := page.Plan(protocol.ReadMinBytes, cursorLen)
	body := page.AppendJSON(nil, plan, mustCursor(keys))
	// The page never splits a character.
	fmt.Println(ok, plan.More, plan.BudgetExhausted, len(body) <= protocol.ReadMinBytes, utf8.ValidString(page.Content[:plan.End]))
	// Output:
	// true true false true true
}

func mustCursor(k *knowledge.Keyring) string {
	c, err := k.SealCursor(knowledge.CursorClaims{Expiry: time.Unix(0, 0)})
	if err != nil {
		panic(err)
	}
	return c
}
