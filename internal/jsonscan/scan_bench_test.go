package jsonscan

import (
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// DESIGN 14 side-by-side benchmark of String's eight-byte skipping (plain8)
// against the byte loop alone (stringPlain). The requests it sits in: a
// search, whose Core answer coreclient decodes (BenchmarkKBSearchDecode), and
// a turn, whose body turn scans (BenchmarkTurn in proxy); see
// docs/performance.md, "DESIGN 14 review".

// stringPlain is String with plain bytes skipped one at a time.
func stringPlain(b []byte, i int) (int, bool, error) {
	i++
	esc := false
	for i < len(b) {
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			n := escapeLenPlain(b[i+1:])
			if n == 0 {
				return 0, false, ErrSyntax
			}
			i += 1 + n
		default: // c < 0x20
			return 0, false, ErrSyntax
		}
	}
	return 0, false, ErrSyntax
}

// escapeLenPlain is the length of the valid escape that e, the bytes after
// a backslash, starts with (a letter, or u and four hex digits); 0 when it
// starts with none.
func escapeLenPlain(e []byte) int {
	if len(e) == 0 {
		return 0
	}
	switch e[0] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 1
	case 'u':
		if len(e) < 5 {
			return 0
		}
		for _, h := range e[1:5] {
			if !isHex(h) {
				return 0
			}
		}
		return 5
	}
	return 0
}

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

func TestStringPlainAgrees(t *testing.T) {
	for _, a := range benchAnswers() {
		for _, i := range stringStarts(a.body) {
			e1, x1, err1 := String(a.body, i)
			e2, x2, err2 := stringPlain(a.body, i)
			if e1 != e2 || x1 != x2 || err1 != err2 {
				t.Fatalf("%s at %d: String %d %v %v, plain %d %v %v", a.name, i, e1, x1, err1, e2, x2, err2)
			}
		}
	}
	if _, err := SkipValue(benchAnswers()[0].body, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkString: every string of the body scanned by String ("fast") and
// by stringPlain ("plain").
func BenchmarkString(b *testing.B) {
	for _, a := range benchAnswers() {
		starts := stringStarts(a.body)
		for _, f := range []struct {
			name string
			fn   func([]byte, int) (int, bool, error)
		}{{"fast", String}, {"plain", stringPlain}} {
			b.Run(a.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(a.body)))
				cpu0 := testkit.ProcessCPU(b)
				for b.Loop() {
					for _, i := range starts {
						if _, _, err := f.fn(a.body, i); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
