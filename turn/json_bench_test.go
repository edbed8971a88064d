package turn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/jsonscan"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/turn/turntest"
)

// benchRequest builds a turn request of at least size bytes with the
// knowledge_delivery member in the middle.
func benchRequest(size int) []byte {
	input := strings.Repeat("Find the order of Ada and explain the refund rules. ", size/50+1)
	return []byte(`{"client_conversation_id":"conv-1","client_turn_id":"turn-1","knowledge_delivery":"on_demand",` +
		`"user_message_id":"msg-1","user_input":"` + input + `","page_context":{"url":"/orders","title":"Orders"},"renderers":["markdown"]}`)
}

func BenchmarkRewriteTurnResponse(b *testing.B) {
	block := []byte(testBlock)
	for _, size := range []int{10 << 10, 256 << 10} {
		body := turntest.Answer(size)
		for _, mode := range []protocol.DeliveryMode{"on_demand", "inline"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := rewriteResponse(body, mode, block); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkParseTurnRequest(b *testing.B) {
	for _, size := range []int{10 << 10, 256 << 10} {
		body := benchRequest(size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzTurnScanString: on any input, the scanner accepts exactly what
// encoding/json accepts as one object, finds the same end for a string, and
// the string decoder (unquote) gives encoding/json's value.
func FuzzTurnScanString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"0123456789abcdef\"x"`, "\"0123456\x1f89\"", `"\u00e9\\\/ \t"`,
		`"退款窗口设为0时, the refund window closes immediately."`, `"unterminated 01234567`,
		"\"\xe6\\n\xff\xed\xa0\x80\"", `"\ud83d\u0041 \ud83d\ud83d\ude80"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		obj := append(append([]byte(`{"k":`), in...), '}')
		end, err := scanObject(obj, 0, 1, nil)
		if got, want := err == nil && end == len(obj), json.Valid(obj); got != want {
			t.Fatalf("scanner accepts %q: %v; json.Valid: %v", obj, got, want)
		}
		if len(in) == 0 || in[0] != '"' {
			return
		}
		end, esc, err := jsonscan.String(in, 0)
		var s string
		jerr := json.Unmarshal(in, &s)
		if err == nil && jerr == nil {
			if want := bytes.IndexByte(in, '\\') >= 0; esc != want {
				t.Fatalf("escape flag for %q: got %v; want %v", in, esc, want)
			}
		}
		if err == nil && !json.Valid(in[:end]) {
			t.Fatalf("scanner ends a string at %d in %q, which is not a valid JSON string", end, in)
		}
		if jerr == nil && (err != nil || end != len(bytes.TrimRight(in, " \t\r\n"))) {
			t.Fatalf("scanner rejects or cuts the valid string %q: end %d, %v", in, end, err)
		}
		if jerr == nil {
			if got, ok := jsonscan.Unquote(in[:end]); !ok || got != s {
				t.Fatalf("jsonscan.Unquote(%q) = %q, %v; encoding/json: %q", in[:end], got, ok, s)
			}
		}
	})
}

// BenchmarkTurnItems: what Core retrieved read from a scanned answer (the
// string decoder over every chunk's ref and content, escapes and CJK).
func BenchmarkTurnItems(b *testing.B) {
	body := turntest.Answer(256 << 10)
	p, err := parseAnswer(body)
	if err != nil {
		b.Fatal(err)
	}
	if len(p.Items()) == 0 {
		b.Fatal("no items")
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		p.Items()
	}
}
