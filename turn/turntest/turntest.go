// Package turntest builds turn bodies for tests and benchmarks.
package turntest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Chunk is one inline knowledge item of a turn answer and its ref.
type Chunk struct {
	DocID          int
	Title, Content string
	Score          float64
}

// Answer builds a realistic bailing.agent-turn-context.v1 answer of
// at least size bytes: inline knowledge chunks (≤ 3000 characters each, as
// Core cuts them, of no real document), memory messages and tool schemas.
func Answer(size int) []byte { return AnswerWith(size, nil) }

// AnswerWith is Answer whose inline knowledge cycles through chunks (real
// chunks of real documents, so same-run hints can be minted from them).
func AnswerWith(size int, chunks []Chunk) []byte {
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
			"schema_version":      "bailing.agent-turn-context.v1",
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
			c := Chunk{DocID: i, Title: "Refund policy", Content: text, Score: 0.82}
			if len(chunks) > 0 {
				c = chunks[len(knowledge)%len(chunks)]
			}
			knowledge = append(knowledge, item{fmt.Sprintf("knowledge:%d", len(knowledge)+1), c.Title, c.Content})
			refs = append(refs, ref{fmt.Sprintf("knowledge:%d", len(refs)+1), c.DocID, c.Title, c.Score})
		case 1:
			recent = append(recent, msg{"user", short(600)})
		default:
			tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%d", i), "input_schema": map[string]any{
				"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string", "description": short(300)}}}})
		}
	}
}
