package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// records returns the JSON log records written to logs so far, and forgets
// them.
func records(t *testing.T, logs *testkit.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.Take()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
		t.Fatalf("gauge %s: %d series (%v); want 1", name, n, err)
	}
	return testkit.Metric(t, reg, name, nil)
}

// TestClientLimitCheck: the sidecar's Core client rate limit is read through
// the read-only user (its column GRANT), logged at warn with the capacity it
// implies (limit ÷ the most enabled KBs one enabled route searches) and
// exported as gauges; an unlimited client is +Inf capacity and no warning.
func TestClientLimitCheck(t *testing.T) {
	db := testdb.New(t)
	cat := openSQL(t, db, nil)
	ctx := context.Background()
	var logs testkit.Buffer
	reg := prometheus.NewRegistry()
	check := catalog.NewClientLimitCheck(cat, testdb.AppA, slog.New(slog.NewJSONHandler(&logs, nil)), reg)

	// The fixtures' widest enabled route is kb-multi: faq and manuals are
	// searched, kb-disabled and kb-missing are not. Core's default limit, 60.
	tests := []struct {
		name         string
		setup        string
		limit        float64
		capacity     float64
		level        string
		maxKBs       float64
		wantCapacity bool
	}{
		{name: "default limit, two KBs", limit: 60, capacity: 30, level: "WARN", maxKBs: 2, wantCapacity: true},
		{name: "a route with three KBs", setup: `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at)
			VALUES ('kb-three', 1, '{"kb_ids":["faq","manuals","other-kb","FAQ"]}', UTC_TIMESTAMP())`,
			limit: 60, capacity: 20, level: "WARN", maxKBs: 3, wantCapacity: true},
		{name: "disabled routes do not count", setup: `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at)
			VALUES ('kb-four-off', 0, '{"kb_ids":["faq","manuals","other-kb","kb-disabled"]}', UTC_TIMESTAMP())`,
			limit: 60, capacity: 20, level: "WARN", maxKBs: 3, wantCapacity: true},
		{name: "sized limit", setup: `UPDATE bz_clients SET rate_limit_per_min = 600 WHERE app_id = 'app-a'`,
			limit: 600, capacity: 200, level: "WARN", maxKBs: 3, wantCapacity: true},
		{name: "unlimited", setup: `UPDATE bz_clients SET rate_limit_per_min = 0 WHERE app_id = 'app-a'`,
			limit: 0, capacity: math.Inf(1), level: "INFO"},
	}
	for _, tt := range tests {
		if tt.setup != "" {
			db.Exec(t, tt.setup)
		}
		if err := check.Check(ctx); err != nil {
			t.Fatalf("%s: got %v; want nil", tt.name, err)
		}
		if got := gaugeValue(t, reg, "knowledge_sidecar_core_client_rate_limit_per_minute"); got != tt.limit {
			t.Errorf("%s: limit gauge got %v; want %v", tt.name, got, tt.limit)
		}
		if got := gaugeValue(t, reg, "knowledge_sidecar_core_search_capacity_per_minute"); got != tt.capacity {
			t.Errorf("%s: capacity gauge got %v; want %v", tt.name, got, tt.capacity)
		}
		recs := records(t, &logs)
		if len(recs) != 1 || recs[0]["level"] != tt.level || recs[0]["client_app_id"] != testdb.AppA {
			t.Fatalf("%s: logs got %v; want one %s record naming the client", tt.name, recs, tt.level)
		}
		if tt.wantCapacity {
			r := recs[0]
			if r["rate_limit_per_min"] != tt.limit || r["max_kbs_per_route"] != tt.maxKBs || r["search_capacity_per_min"] != tt.capacity {
				t.Errorf("%s: log got %v; want limit %v, max KBs %v, capacity %v", tt.name, r, tt.limit, tt.maxKBs, tt.capacity)
			}
		}
	}

	t.Run("unknown client", func(t *testing.T) {
		var logs testkit.Buffer
		c := catalog.NewClientLimitCheck(cat, "no-such-app", slog.New(slog.NewJSONHandler(&logs, nil)), nil)
		if err := c.Check(ctx); !errors.Is(err, corefacts.ErrNotFound) {
			t.Errorf("got %v; want ErrNotFound", err)
		}
		if recs := records(t, &logs); len(recs) != 1 || recs[0]["level"] != "WARN" {
			t.Errorf("logs got %v; want one warning", recs)
		}
	})
}

// TestClientLimitCheckRunsWithSchemaChecks: hooked on the schema gate, the
// check runs at the start-up check (and not before the schema passed).
func TestClientLimitCheckRunsWithSchemaChecks(t *testing.T) {
	db := testdb.New(t)
	db.Exec(t, "UPDATE bz_clients SET rate_limit_per_min = 60 WHERE app_id = 'app-a'")
	db.Exec(t, "DELETE FROM bz_schema_migrations WHERE filename = '056_agent_client_runtime.sql'")
	cat := openSQL(t, db, nil)
	var logs testkit.Buffer
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gate := catalog.NewSchemaGate(cat, time.Minute, func() time.Time { return now }, nil)
	check := catalog.NewClientLimitCheck(cat, testdb.AppA, slog.New(slog.NewJSONHandler(&logs, nil)), reg)
	gate.AfterCheck(func(ctx context.Context) { _ = check.Check(ctx) })
	ctx := context.Background()
	if err := gate.Check(ctx); err == nil {
		t.Fatal("schema check passed without migration 056")
	}
	if recs := records(t, &logs); len(recs) != 0 {
		t.Errorf("logs before the schema passed: got %v; want none", recs)
	}
	db.Exec(t, "INSERT INTO bz_schema_migrations (filename) VALUES ('056_agent_client_runtime.sql')")
	if err := gate.Check(ctx); err != nil {
		t.Fatalf("schema check: got %v; want nil", err)
	}
	recs := records(t, &logs)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["search_capacity_per_min"] != 30.0 {
		t.Errorf("logs after the schema check: got %v; want the rate-limit warning with capacity 30", recs)
	}
	if got := gaugeValue(t, reg, "knowledge_sidecar_core_client_rate_limit_per_minute"); got != 60 {
		t.Errorf("limit gauge got %v; want 60", got)
	}
}
