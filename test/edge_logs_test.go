package test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// TestLongPathLogged: a 200 KB path that ends in a 5xx (Core is down) is
// logged once at warn, cut to 256 bytes, and neither the query nor a token
// in it ever reaches the log, at any level.
func TestLongPathLogged(t *testing.T) {
	var sink testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc := StartSidecar(t, SidecarOptions{CoreURL: "http://" + deadAddr(t), Logger: log,
		Serve: proxy.ServeOptions{MaxHeaderBytes: 1 << 20}})
	const secret = "tok_9f8e7d6c5b4a39281706"
	path := "/agent-api/v1/" + strings.Repeat("segment/", 200_000/8)
	res, err := http.Get(sc.URL + path + "?token=" + secret + "&x=1")
	if err != nil {
		t.Fatal(err)
	}
	drainClose(res.Body)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d; want 502 (Core down)", res.StatusCode)
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "502"}, 1)
	warnWithPath := 0
	for _, line := range sink.Lines() {
		if strings.Contains(line, secret) || strings.Contains(line, "token=") {
			t.Errorf("log line holds the query: %.200s…", line)
		}
		if len(line) > 2048 {
			t.Errorf("log line of %d bytes; want at most 2 KiB", len(line))
		}
		var rec struct {
			Level string `json:"level"`
			Path  string `json:"path"`
		}
		_ = json.Unmarshal([]byte(line), &rec)
		if rec.Path == "" {
			continue
		}
		if len(rec.Path) > 256 || !strings.HasPrefix(path, strings.TrimSuffix(rec.Path, "…")) {
			t.Errorf("logged path: %d bytes %.80q…; want at most 256 bytes of the path's start", len(rec.Path), rec.Path)
		}
		if rec.Level == "WARN" {
			warnWithPath++
		}
	}
	if warnWithPath != 1 {
		t.Errorf("warn lines with the path: got %d; want 1 per 5xx request", warnWithPath)
	}
}
