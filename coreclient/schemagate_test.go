package coreclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// schemaMem is an in-memory catalog whose schema check the test controls.
type schemaMem struct {
	*coreclient.MemCatalog
	err    error
	checks int
}

func (s *schemaMem) CheckSchema(context.Context) error { s.checks++; return s.err }

var _ knowledge.Catalog = (*coreclient.SchemaGate)(nil)

func TestSchemaGate(t *testing.T) {
	ctx := context.Background()
	mem := &schemaMem{MemCatalog: coreclient.NewMemCatalog(), err: &coreclient.SchemaError{Missing: []string{"056_agent_client_runtime.sql"}}}
	mem.PutRoute("orders", true, `{"kb_ids":["faq"]}`)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	g := coreclient.NewSchemaGate(mem, time.Minute, func() time.Time { return now }, reg)

	var se *coreclient.SchemaError
	if err := g.Check(ctx); !errors.As(err, &se) {
		t.Fatalf("startup check: got %v; want the *SchemaError", err)
	}
	// While the schema is missing: every call is unavailable, without
	// re-checking before the interval.
	if _, err := g.Route(ctx, "orders"); !errors.Is(err, coreclient.ErrUnavailable) || !errors.Is(err, coreclient.ErrSchemaUnverified) {
		t.Fatalf("Route before the schema passed: got %v; want ErrSchemaUnverified (ErrUnavailable)", err)
	}
	if g.Usable() {
		t.Error("Usable: got true before the schema passed")
	}
	if mem.checks != 1 {
		t.Errorf("checks: got %d; want 1 (no re-check before the interval)", mem.checks)
	}
	if got := metricValue(t, reg, "knowledge_sidecar_catalog_schema_ok", nil); got != 0 {
		t.Errorf("schema_ok: got %v; want 0", got)
	}
	// The migration is applied; after the interval the gate re-checks and opens.
	mem.err = nil
	now = now.Add(time.Minute)
	r, err := g.Route(ctx, "orders")
	if err != nil || r.Knowledge == nil {
		t.Fatalf("Route after the schema passed: got %+v, %v", r, err)
	}
	if !g.Usable() || mem.checks != 2 {
		t.Errorf("got usable %v after %d checks; want true after 2", g.Usable(), mem.checks)
	}
	if got := metricValue(t, reg, "knowledge_sidecar_catalog_schema_ok", nil); got != 1 {
		t.Errorf("schema_ok: got %v; want 1", got)
	}
	// Once passed, never re-checked.
	now = now.Add(time.Hour)
	g.Run(ctx, "x")
	if mem.checks != 2 {
		t.Errorf("checks: got %d; want 2 (no re-check once passed)", mem.checks)
	}
}
