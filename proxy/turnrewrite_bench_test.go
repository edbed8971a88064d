package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// turnBenchResponse builds a realistic bailing.agent-turn-context.v1 answer of
// at least size bytes: inline knowledge chunks (≤ 3000 characters each, as
// Core cuts them), memory messages and tool schemas.
func turnBenchResponse(size int) []byte {
	type item struct {
		Ref     string `json:"ref"`
		Title   string `json:"title"`
		Content string `json:"content"`
	}
	type ref struct {
		Ref   string  `json:"ref"`
		DocID int     `json:"doc_id"`
		Title string  `json:"title"`
		Score float64 `json:"score"`
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var (
		knowledge []item
		refs      []ref
		recent    []msg
		tools     []map[string]any
	)
	runes := []rune(strings.Repeat("退款窗口设为0时, the refund window closes immediately. \"quoted\" \\ ", 60))
	text := string(runes[:3000])
	short := func(n int) string { return string(runes[:n]) }
	doc := func() []byte {
		v := map[string]any{
			"schema_version":      turnContextSchema,
			"run_id":              "6f1c2a8e-6a55-4c6b-9d7e-2f1f1f1f1f1f",
			"profile_revision":    strings.Repeat("a", 64),
			"capability_revision": strings.Repeat("b", 64),
			"context": map[string]any{
				"instructions":   "Answer using the workspace's rules.",
				"page_context":   map[string]any{"url": "/orders", "title": "Orders"},
				"renderers":      []string{"markdown"},
				"memory":         map[string]any{"summary": nil, "recent": recent},
				"memory_refs":    []any{map[string]any{"thread_id": 7, "summary_upto_id": 0, "prior_messages": 0}},
				"knowledge":      knowledge,
				"knowledge_refs": refs,
				"governance":     map[string]any{"planner": "local_agent", "knowledge_trust": "reference_only", "max_tool_calls": 5},
			},
			"active_tools": tools,
		}
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	for i := 1; ; i++ {
		b := doc()
		if len(b) >= size {
			return b
		}
		switch i % 3 {
		case 0:
			knowledge = append(knowledge, item{fmt.Sprintf("knowledge:%d", len(knowledge)+1), "Refund policy", text})
			refs = append(refs, ref{fmt.Sprintf("knowledge:%d", len(refs)+1), i, "Refund policy", 0.82})
		case 1:
			recent = append(recent, msg{"user", short(600)})
		default:
			tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%d", i), "input_schema": map[string]any{
				"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string", "description": short(300)}}}})
		}
	}
}

// turnBenchRequest builds a turn request of at least size bytes with the
// knowledge_delivery member in the middle.
func turnBenchRequest(size int) []byte {
	input := strings.Repeat("Find the order of Ada and explain the refund rules. ", size/50+1)
	return []byte(`{"client_conversation_id":"conv-1","client_turn_id":"turn-1","knowledge_delivery":"on_demand",` +
		`"user_message_id":"msg-1","user_input":"` + input + `","page_context":{"url":"/orders","title":"Orders"},"renderers":["markdown"]}`)
}

func BenchmarkRewriteTurnResponse(b *testing.B) {
	block := []byte(turnTestBlock)
	for _, size := range []int{10 << 10, 256 << 10} {
		body := turnBenchResponse(size)
		for _, mode := range []string{"on_demand", "inline"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := RewriteTurnResponse(body, mode, block); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkParseTurnRequest(b *testing.B) {
	for _, size := range []int{10 << 10, 256 << 10} {
		body := turnBenchRequest(size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseTurnRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTurnPlain8 checks the eight-byte test against the byte table: every
// byte value at every position of words whose other bytes are random, and
// words of random bytes.
func TestTurnPlain8(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	ref := func(w [8]byte) bool {
		for _, c := range w {
			if !turnPlainByte[c] {
				return false
			}
		}
		return true
	}
	check := func(w [8]byte) {
		t.Helper()
		if got, want := turnPlain8(binary.LittleEndian.Uint64(w[:])), ref(w); got != want {
			t.Fatalf("turnPlain8(%q) = %v; want %v", w[:], got, want)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			for range 64 {
				var w [8]byte
				for i := range w {
					w[i] = byte(0x20 + r.IntN(256-0x20)) // mostly plain
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	for range 1 << 16 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}

// FuzzTurnScanString: on any input, the scanner accepts exactly what
// encoding/json accepts as one object, and finds the same end for a string.
func FuzzTurnScanString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"0123456789abcdef\"x"`, "\"0123456\x1f89\"", `"\u00e9\\\/ \t"`,
		`"退款窗口设为0时, the refund window closes immediately."`, `"unterminated 01234567`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		obj := append(append([]byte(`{"k":`), in...), '}')
		end, err := turnScanObject(obj, 0, 1, nil)
		if got, want := err == nil && end == len(obj), json.Valid(obj); got != want {
			t.Fatalf("scanner accepts %q: %v; json.Valid: %v", obj, got, want)
		}
		if len(in) == 0 || in[0] != '"' {
			return
		}
		end, esc, err := turnScanString(in, 0)
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
	})
}
