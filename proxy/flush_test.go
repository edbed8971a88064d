package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// TestPassthroughStreams: with FlushInterval 0, bodies that are streams
// still stream through the pass-through proxy. The upstream writes one
// event, flushes, and waits until the test has read that event through the
// sidecar before it writes the next one; a proxy that held the bytes back
// until the body ended (or its buffers filled) would leave the client
// waiting for an event the upstream never sends, and the client's deadline
// fails the case instead of a hang.
func TestPassthroughStreams(t *testing.T) {
	const events = 4
	event := func(i int) string { return fmt.Sprintf("id: %d\ndata: {\"n\":%d}\n\n", i, i) }
	total := 0
	for i := range events {
		total += len(event(i))
	}
	cases := []struct {
		name, contentType string
		length            bool // the upstream sends a Content-Length
	}{
		{"sse", "text/event-stream", false},
		// The stdlib flushes text/event-stream whatever its framing.
		{"sse with length and parameters", "text/event-stream; charset=utf-8", true},
		// No length: the answer is chunked, and streams as it comes.
		{"unknown length", "application/octet-stream", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acks := make([]chan struct{}, events)
			for i := range acks {
				acks[i] = make(chan struct{})
			}
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				if c.length {
					w.Header().Set("Content-Length", strconv.Itoa(total))
				}
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				for i := range events {
					_, _ = io.WriteString(w, event(i))
					_ = rc.Flush()
					select {
					case <-acks[i]:
					case <-r.Context().Done():
						return
					}
				}
			}))
			defer up.Close()
			u, _ := url.Parse(up.URL)
			s, err := New(Options{CoreURL: u})
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(s.Handler())
			defer front.Close()
			// A guard against a hang, not a timing: a stream that flows
			// takes milliseconds.
			cl := &http.Client{Timeout: 30 * time.Second}
			res, err := cl.Get(front.URL + "/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if got := res.Header.Get("Content-Type"); got != c.contentType {
				t.Errorf("Content-Type: got %q; want %q", got, c.contentType)
			}
			if c.length && res.ContentLength != int64(total) {
				t.Errorf("Content-Length: got %d; want %d", res.ContentLength, total)
			}
			for i := range events {
				want := event(i)
				buf := make([]byte, len(want))
				if _, err := io.ReadFull(res.Body, buf); err != nil {
					t.Fatalf("event %d: %v (the proxy held it back?)", i, err)
				}
				if string(buf) != want {
					t.Fatalf("event %d: got %q; want %q", i, buf, want)
				}
				close(acks[i]) // only now may the upstream write the next
			}
			if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
				t.Errorf("after the last event: got %q, %v; want EOF", rest, err)
			}
		})
	}
}
