package fakecore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestRetentionBounded: 100 distinct paths, each with a 1 MiB header (the
// demo's double serves whatever reaches it), leave the fake's memory within
// its recording bound, and the newest request is still the one recorded.
// (Without the Node-like header bound, which would refuse them first.)
func TestRetentionBounded(t *testing.T) {
	c := fakecore.New(fakecore.Options{MaxHeaderSize: -1})
	pad := strings.Repeat("h", 1<<20)
	before := liveHeap()
	const n = 100
	for i := range n {
		r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/agent-api/v1/other/%d/%s", i, strings.Repeat("p", 4096)), nil)
		r.Header.Set("X-Pad", strings.Repeat("h", len(pad)-i)) // its own bytes, as if parsed off the wire
		c.ServeHTTP(httptest.NewRecorder(), r)
	}
	grown := int64(liveHeap()) - int64(before)
	runtime.KeepAlive(c)
	t.Logf("the double grew %.1f MiB for %d requests with 1 MiB headers", float64(grown)/(1<<20), n)
	if grown > 16<<20 {
		t.Errorf("heap grew %d MiB; want under 16 MiB (the recording bound is 8 MiB)", grown>>20)
	}
	last, ok := c.LastRequest(fmt.Sprintf("/agent-api/v1/other/%d/", n-1))
	if !ok || len(last.Header.Get("X-Pad")) != len(pad)-(n-1) {
		t.Errorf("newest request not recorded (found %v)", ok)
	}
	if got := c.Calls("/agent-api/v1/other/"); got != n {
		t.Errorf("Calls: got %d; want %d", got, n)
	}
}
