package mcpserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// runbook is a Markdown document of about 200 KB (past the 128 KiB chain
// budget), one numbered line per step, and the offset of line k.
func runbook(k int) (content string, at int) {
	var b strings.Builder
	for i := 0; b.Len() < 200_000; i++ {
		if i == k {
			at = b.Len()
		}
		fmt.Fprintf(&b, "Step %d: the *on-call* engineer checks `queue %d` and restarts the **worker %d** when the backlog grows.\n", i, i, i)
	}
	return b.String(), at
}

// TestReadNearVariants: on a document past 64 KiB, near finds a passage
// ~80 KB in however a model copied it — in lower case, without Markdown
// marks, with white space changed, or 15 words with two of them changed
// (the closest passage) — and each answer is a window of at most 8,192
// bytes of the document holding the passage within its first 2 KiB, whose
// location line names its bytes and whose cursor continues exactly where
// it ends.
func TestReadNearVariants(t *testing.T) {
	const k = 800
	content, line := runbook(k)
	if line < 64<<10 {
		t.Fatalf("precondition: the line is at %d", line)
	}
	q := strconv.Itoa(k)
	for _, tc := range []struct {
		name, near string
		closest    bool
	}{
		{"lower case, no marks", "step " + q + ": the on-call engineer checks queue " + q + " and restarts the worker " + q, false},
		{"white space", "Step  " + q + ":\nthe *on-call*   engineer checks `queue " + q + "`", false},
		{"as rendered", "the on-call engineer checks queue " + q + " and restarts the worker " + q + " when the backlog grows.", false},
		{"two words changed", "on-call engineer verifies queue " + q + " and restarts the worker " + q + " once the backlog grows", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &chain{title: "Runbook", content: content, pageBytes: func(m int) int { return m }}
			text, v := callOK(t, connect(t, Options{Backend: c}), protocol.ReadTool, map[string]any{"ref": "kr2.doc", "near": tc.near})
			got := v["content"].(string)
			start := strings.Index(content, got)
			end := start + len(got)
			i := line - start
			switch {
			case got == "" || start < 0 || len(got) > NearWindowBytes:
				t.Fatalf("window of %d bytes at %d; want at most %d bytes of the document", len(got), start, NearWindowBytes)
			case i < 0 || i >= 2048 || !strings.HasPrefix(got[i:], "Step "+q+":"):
				t.Errorf("the passage's line is at byte %d of the window; want within the first 2 KiB", i)
			case v["next_cursor"] != "c"+strconv.Itoa(end):
				t.Errorf("next_cursor %v; want c%d, where the window ends", v["next_cursor"], end)
			}
			want := "[bytes " + thousands(int64(start)) + "–" + thousands(int64(end)) + " of " + thousands(int64(len(content))) + "] "
			if !strings.HasPrefix(v["note"].(string), want) || !strings.Contains(text, "\n---\n"+want) {
				t.Errorf("note %.120q; want it to start %q, in the text too", v["note"], want)
			}
			if got := strings.Contains(text, "closest passage"); got != tc.closest {
				t.Errorf("text says closest passage: %v; want %v", got, tc.closest)
			}
			if !strings.Contains(text, `"cursor":"c`+strconv.Itoa(end)+`"`) {
				t.Errorf("the text does not give the next call with the window's cursor")
			}
		})
	}
}

// TestReadNearWindowSize: max_bytes, when given, caps the window (and is
// the walk's page size); without it the window is at most 8,192 bytes. A
// window ends on a page boundary rather than less than the smallest page
// (4 KiB) past one, so it is shorter than the cap by less than that.
func TestReadNearWindowSize(t *testing.T) {
	content, line := runbook(800)
	near := "Step 800: the on-call engineer"
	for _, size := range []int{protocol.ReadMinBytes, 6000, 0} {
		c := &chain{title: "Runbook", content: content, pageBytes: func(m int) int { return m }}
		args := map[string]any{"ref": "kr2.doc", "near": near}
		limit := NearWindowBytes
		if size > 0 {
			args["max_bytes"], limit = size, size
		}
		_, v := callOK(t, connect(t, Options{Backend: c}), protocol.ReadTool, args)
		got := v["content"].(string)
		start := strings.Index(content, got)
		if len(got) > limit || len(got) <= limit-protocol.ReadMinBytes || start < 0 || start > line || line-start >= 2048 {
			t.Errorf("max_bytes %d: a window of %d bytes at %d; want at most %d (less by under 4 KiB) holding the line at %d", size, len(got), start, limit, line)
		}
		walk := float64(protocol.ReadMaxBytes)
		if size > 0 {
			walk = float64(size)
		}
		if b := c.bodies[0]; b["max_bytes"] != walk {
			t.Errorf("max_bytes %d: the walk read pages of %v; want %v", size, b["max_bytes"], walk)
		}
	}
}

// TestReadNearMissPastBudget: a miss on a document longer than the chain
// budget is short (no document text, at most 6 KiB), says not found and
// that the rest is unreachable through this ref, and offers no cursor and
// no "more follows".
func TestReadNearMissPastBudget(t *testing.T) {
	content, _ := runbook(0)
	c := &chain{title: "Runbook", content: content, pageBytes: func(m int) int { return m }}
	text, v := callOK(t, connect(t, Options{Backend: c}), protocol.ReadTool, map[string]any{"ref": "kr2.doc", "near": "a passage nobody ever wrote in this runbook"})
	if len(text) > 6144 || v["content"] != "" || v["next_cursor"] != nil || v["budget_exhausted"] != true {
		t.Errorf("%d bytes of text, content %d bytes, next_cursor %v; want ≤ 6,144, none, none", len(text), len(v["content"].(string)), v["next_cursor"])
	}
	for _, want := range []string{"Not found", "unreachable through this ref", "[searched bytes 0–131,072 of "} {
		if !strings.Contains(text, want) || !strings.Contains(v["note"].(string), want) {
			t.Errorf("text %q; want it (and the note) to say %q", text, want)
		}
	}
	if strings.Contains(text, "More follows") || strings.Contains(text, "cursor") {
		t.Errorf("text %q offers another page", text)
	}
	if len(c.bodies) != protocol.ReadChainMaxBytes/protocol.ReadMaxBytes {
		t.Errorf("%d requests; want the chain walked to its budget", len(c.bodies))
	}
}

// recChain is a chain that records what the result of each call showed.
type recChain struct {
	*chain
	shown []*Shown
}

func (r *recChain) Begin(ctx context.Context) context.Context { return ctx }

func (r *recChain) End(_ context.Context, s *Shown) error {
	r.shown = append(r.shown, s)
	return nil
}

// TestReadNearClosestAuditRange: a closest passage near the end of the
// second page is taken after the walk read the whole chain (4 pages); its
// window runs into the third page, read again up to the window's end, and
// the audit range is exactly the window: from its start on the second page
// through the first bytes of the third, not the rest of the third page the
// walk read.
func TestReadNearClosestAuditRange(t *testing.T) {
	content, _ := runbook(0)
	k, line := -1, 0
	for i := 0; k < 0; i++ {
		at := strings.Index(content, "Step "+strconv.Itoa(i)+":")
		if at > 2*protocol.ReadMaxBytes-3000 && at < 2*protocol.ReadMaxBytes-400 {
			k, line = i, at
		}
	}
	q := strconv.Itoa(k)
	c := &recChain{chain: &chain{title: "Runbook", content: content, pageBytes: func(m int) int { return m }}}
	text, v := callOK(t, connect(t, Options{Backend: c}), protocol.ReadTool, map[string]any{"ref": "kr2.doc",
		"near": "on-call engineer verifies queue " + q + " and restarts the worker " + q + " once the backlog grows"})
	got := v["content"].(string)
	start := strings.Index(content, got)
	end := start + len(got)
	if !strings.Contains(text, "closest passage") || start < 0 || start > line || end <= 2*protocol.ReadMaxBytes || len(got) > NearWindowBytes {
		t.Fatalf("window [%d, %d) for a line at %d: %.200q; want the closest passage's window running past the second page", start, end, line, text)
	}
	if len(c.bodies) != 5 || v["next_cursor"] != "c"+strconv.Itoa(end) {
		t.Errorf("%d requests, next_cursor %v; want the 4-page walk and the third page read again, the cursor at c%d", len(c.bodies), v["next_cursor"], end)
	}
	want := Shown{First: 1, Skip: start - protocol.ReadMaxBytes, Last: 2, Keep: end - 2*protocol.ReadMaxBytes}
	if len(c.shown) != 1 || c.shown[0] == nil || *c.shown[0] != want {
		t.Errorf("shown %+v; want %+v", c.shown, want)
	}
}
