package coreclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// coreSearchAnswer is a /kb/search answer as Core writes it (CORE_FACTS
// §5.2; JSON.stringify: no HTML escaping, non-ASCII as is) with n hits of
// about 1 KiB of mixed Chinese and English chunk text each, newlines and
// quotes included, from two documents of one KB.
func coreSearchAnswer(n int) []byte {
	para := "退款窗口设为0时，订单一旦签收即不可申请退款。Refunds are issued to the original payment method within 7 business days; " +
		"\"express\" orders ship the same day.\n客服可在后台查看每笔订单的物流状态与售后记录，并按规则处理争议。"
	hits := make([]corefacts.Hit, 0, n)
	for i := range n {
		var c strings.Builder
		for c.Len() < 1000 {
			fmt.Fprintf(&c, "%d. %s\n", c.Len()/len(para)+1, para)
		}
		hits = append(hits, corefacts.Hit{
			Score: 0.912 - float64(i)*0.013, Content: c.String(), DocID: int64(101 + i%2),
			Title: []string{"退款与售后政策", "Shipping & delivery FAQ"}[i%2], Seq: i / 2, KBID: "cs-faq",
		})
	}
	return fakecore.KBSearchAnswer([]string{"cs-faq"}, hits)
}

// BenchmarkKBSearchDecode: Core's 200 answer to /kb/search with 20 hits
// (about 24 KiB) decoded into searchResponse, by encoding/json (what
// SearchKB did before decodeSearch) and by decodeSearch.
func BenchmarkKBSearchDecode(b *testing.B) {
	body := coreSearchAnswer(20)
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var r searchResponse
			if err := json.Unmarshal(body, &r); err != nil || len(r.Hits) != 20 {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if r, err := decodeSearch(body); err != nil || len(r.Hits) != 20 {
				b.Fatal(err)
			}
		}
	})
}
