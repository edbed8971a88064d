package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// schemaMem is an in-memory catalog whose schema check the test controls.
type schemaMem struct {
	*catalog.MemCatalog
	err    error
	checks int
}

func (s *schemaMem) CheckSchema(context.Context) error { s.checks++; return s.err }

var (
	_ knowledge.Catalog = (*catalog.SchemaGate)(nil)
	// The gate keeps the SQL catalog's one-statement route read
	// (TestBuiltSidecarStatements counts what losing it costs).
	_ knowledge.RouteBundler = (*catalog.SchemaGate)(nil)
)

func TestSchemaGate(t *testing.T) {
	ctx := context.Background()
	mem := &schemaMem{MemCatalog: catalog.NewMemCatalog(), err: &catalog.SchemaError{Missing: []string{"056_agent_client_runtime.sql"}}}
	mem.PutRoute("orders", true, `{"kb_ids":["faq"]}`)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	g := catalog.NewSchemaGate(mem, time.Minute, func() time.Time { return now }, reg)

	var se *catalog.SchemaError
	if err := g.Check(ctx); !errors.As(err, &se) {
		t.Fatalf("startup check: got %v; want the *SchemaError", err)
	}
	// While the schema is missing: every call is unavailable, without
	// re-checking before the first backoff (1s).
	if _, err := g.Route(ctx, testkit.RouteKey("orders")); !errors.Is(err, corefacts.ErrUnavailable) || !errors.Is(err, catalog.ErrSchemaUnverified) {
		t.Fatalf("Route before the schema passed: got %v; want ErrSchemaUnverified (ErrUnavailable)", err)
	}
	// The one-statement route read is what every read and most searches
	// use: it is held back too.
	if _, err := g.RouteBundle(ctx, testkit.RouteKey("orders"), []string{"faq"}, 1); !errors.Is(err, catalog.ErrSchemaUnverified) {
		t.Fatalf("RouteBundle before the schema passed: got %v; want ErrSchemaUnverified", err)
	}
	if g.Usable() {
		t.Error("Usable: got true before the schema passed")
	}
	if mem.checks != 1 {
		t.Errorf("checks: got %d; want 1 (no re-check before the backoff)", mem.checks)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_schema_ok", nil); got != 0 {
		t.Errorf("schema_ok: got %v; want 0", got)
	}
	// The migration is applied; after the backoff the gate re-checks and opens.
	mem.err = nil
	now = now.Add(time.Minute)
	r, err := g.Route(ctx, testkit.RouteKey("orders"))
	if err != nil || r.Knowledge == nil {
		t.Fatalf("Route after the schema passed: got %+v, %v", r, err)
	}
	if !g.Usable() || mem.checks != 2 {
		t.Errorf("got usable %v after %d checks; want true after 2", g.Usable(), mem.checks)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_schema_ok", nil); got != 1 {
		t.Errorf("schema_ok: got %v; want 1", got)
	}
	// Once passed, never re-checked.
	now = now.Add(time.Hour)
	g.Run(ctx, "x")
	if mem.checks != 2 {
		t.Errorf("checks: got %d; want 2 (no re-check once passed)", mem.checks)
	}
}

// TestSchemaGateBackoff: a failing start-up check is retried by the
// requests after 1s, 2s, 4s, … (doubling, capped at the interval), never
// earlier, and the gate opens at the first check after the catalog is back
// (a replica started before its catalog serves within seconds).
func TestSchemaGateBackoff(t *testing.T) {
	ctx := context.Background()
	mem := &schemaMem{MemCatalog: catalog.NewMemCatalog(), err: fmt.Errorf("%w: dial tcp: connection refused", corefacts.ErrUnavailable)}
	mem.PutRoute("orders", true, `{"kb_ids":["faq"]}`)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	const interval = 30 * time.Second
	g := catalog.NewSchemaGate(mem, interval, func() time.Time { return now }, nil)
	if err := g.Check(ctx); err == nil {
		t.Fatal("start-up check passed against a catalog that is down")
	}
	// Each wait just short of the backoff makes no check; at the backoff one.
	checks := 1
	for _, wait := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		wait *= time.Second
		now = now.Add(wait - time.Millisecond)
		if _, err := g.Route(ctx, testkit.RouteKey("orders")); !errors.Is(err, catalog.ErrSchemaUnverified) {
			t.Fatalf("Route while down: got %v; want ErrSchemaUnverified", err)
		}
		if mem.checks != checks {
			t.Fatalf("%v after the last check: %d checks; want %d (no re-check before the backoff)", wait-time.Millisecond, mem.checks, checks)
		}
		now = now.Add(time.Millisecond)
		g.Route(ctx, testkit.RouteKey("orders"))
		checks++
		if mem.checks != checks {
			t.Fatalf("%v after the last check: %d checks; want %d", wait, mem.checks, checks)
		}
	}

	// A second gate: the catalog comes back 1.5s after start; the request at
	// 3s (the second backoff ends) is served.
	mem2 := &schemaMem{MemCatalog: mem.MemCatalog, err: mem.err}
	now = start
	g2 := catalog.NewSchemaGate(mem2, interval, func() time.Time { return now }, nil)
	_ = g2.Check(ctx)
	now = start.Add(time.Second)
	g2.Route(ctx, testkit.RouteKey("orders")) // still down: next check 2s later
	mem2.err = nil
	now = start.Add(3 * time.Second)
	if r, err := g2.Route(ctx, testkit.RouteKey("orders")); err != nil || r.Knowledge == nil {
		t.Fatalf("Route 3s after start, catalog back at 1.5s: got %+v, %v; want served", r, err)
	}
	if mem2.checks != 3 || !g2.Usable() {
		t.Errorf("checks %d, usable %v; want 3 checks and usable", mem2.checks, g2.Usable())
	}
}
