package coreclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// coreSearchAnswer is a /kb/search answer as Core writes it (CORE_FACTS
// §5.2; JSON.stringify: no HTML escaping, non-ASCII as is) with n hits of
// about 1 KiB of mixed Chinese and English chunk text each, newlines and
// quotes included, from two documents of one KB.
func coreSearchAnswer(n int) []byte {
	type hit struct {
		Score   float64 `json:"score"`
		Content string  `json:"content"`
		DocID   int64   `json:"doc_id"`
		Title   string  `json:"title"`
		Seq     int     `json:"seq"`
		KBID    string  `json:"kb_id"`
	}
	var r struct {
		KBIDs []string `json:"kb_ids"`
		Hits  []hit    `json:"hits"`
	}
	r.KBIDs = []string{"cs-faq"}
	r.Hits = []hit{}
	para := "退款窗口设为0时，订单一旦签收即不可申请退款。Refunds are issued to the original payment method within 7 business days; " +
		"\"express\" orders ship the same day.\n客服可在后台查看每笔订单的物流状态与售后记录，并按规则处理争议。"
	for i := range n {
		var c strings.Builder
		for c.Len() < 1000 {
			fmt.Fprintf(&c, "%d. %s\n", c.Len()/len(para)+1, para)
		}
		r.Hits = append(r.Hits, hit{
			Score: 0.912 - float64(i)*0.013, Content: c.String(), DocID: int64(101 + i%2),
			Title: []string{"退款与售后政策", "Shipping & delivery FAQ"}[i%2], Seq: i / 2, KBID: "cs-faq",
		})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
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
