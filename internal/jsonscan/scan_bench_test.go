package jsonscan

import (
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// BenchmarkString times String on the bodies it scans in a request: a
// search, whose Core answer coreclient decodes (BenchmarkKBSearchDecode),
// and a turn, whose body turn scans (BenchmarkTurn in proxy).

// benchAnswers are the JSON bodies String scans in a request: a 4 KiB Core
// search answer (four hits of about 1 KiB of mixed Chinese and English
// chunk text with escaped newlines and quotes) and a 256 KiB turn answer
// (one long Markdown string).
func benchAnswers() []struct {
	name string
	body []byte
} {
	para := `退款窗口设为0时，订单一旦签收即不可申请退款。Refunds are issued to the original payment method within 7 business days; ` +
		`\"express\" orders ship the same day.\n客服可在后台查看每笔订单的物流状态与售后记录，并按规则处理争议。\n`
	var s strings.Builder
	s.WriteString(`{"code":0,"data":{"hits":[`)
	for i := range 4 {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(`{"kb_id":"cs-faq","doc_id":101,"seq":3,"title":"退款与售后政策","score":0.91,"content":"`)
		for c := 0; c < 1000; c += len(para) {
			s.WriteString(para)
		}
		s.WriteString(`"}`)
	}
	s.WriteString(`]}}`)
	line := `The refund window closes 30 days after delivery; \"express\" orders ship the same day. 退款窗口为三十天。\n`
	turn := `{"answer":"` + strings.Repeat(line, (256<<10)/len(line)) + `","status":"ok"}`
	return []struct {
		name string
		body []byte
	}{{"search4KiB", []byte(s.String())}, {"turn256KiB", []byte(turn)}}
}

// stringStarts returns the index of every string literal's opening quote.
func stringStarts(b []byte) []int {
	var starts []int
	for i := 0; i < len(b); i++ {
		if b[i] == '"' {
			starts = append(starts, i)
			end, _, err := String(b, i)
			if err != nil {
				panic(err)
			}
			i = end - 1
		}
	}
	return starts
}

// TestBenchAnswers: the benchmark's bodies are valid JSON, every string
// scanned.
func TestBenchAnswers(t *testing.T) {
	for _, a := range benchAnswers() {
		if len(stringStarts(a.body)) == 0 {
			t.Fatalf("%s: no string", a.name)
		}
		if end, err := SkipValue(a.body, 0, 0); err != nil || end != len(a.body) {
			t.Fatalf("%s: SkipValue %d, %v; want %d", a.name, end, err, len(a.body))
		}
	}
}

// BenchmarkString: every string of the body scanned by String.
func BenchmarkString(b *testing.B) {
	for _, a := range benchAnswers() {
		starts := stringStarts(a.body)
		b.Run(a.name, func(b *testing.B) {
			b.SetBytes(int64(len(a.body)))
			cpu0 := testkit.ProcessCPU(b)
			for b.Loop() {
				for _, i := range starts {
					if _, _, err := String(a.body, i); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
