package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// exported is one metric the sidecar registers.
type exported struct {
	labels []string // sorted: constant and variable labels
	typ    string   // "counter", "gauge", "histogram", "summary"; "" when no series exists yet
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst  = regexp.MustCompile(`constLabels: \{(.*?)\}, variableLabels`)
	descVar    = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
	constLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// exportedMetrics builds the whole sidecar (knowledge on, Redis ledger when
// available) over the fake Core and a fresh catalog and returns every metric
// it registers, by name, from the collectors' descriptors — so vectors that
// have no series yet are included. Go and process collector metrics are left
// out (documented as a group).
func exportedMetrics(t *testing.T) map[string]exported {
	t.Helper()
	a := buildForMetrics(t, testdb.AppA) // the rate-limit gauges exist only with a client app id
	out := map[string]exported{}
	collectors := a.Collectors()
	for _, c := range collectors {
		typ := collectorType(c)
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name, labels := readDesc(t, d)
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				continue
			}
			out[name] = exported{labels: labels, typ: typ}
		}
	}
	fams, err := a.Server.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams { // custom collectors: the type of their series
		if e, ok := out[f.GetName()]; ok && e.typ == "" {
			e.typ = strings.ToLower(f.GetType().String())
			out[f.GetName()] = e
		}
	}
	return out
}

// collectorType is the metric type of a client_golang metric or vector; ""
// for anything else. Gauge before Counter: a Gauge also has Inc and Add. A
// plain Histogram and a plain Summary have the same methods, so neither is
// told apart here: "" leaves it to the gathered family's type (a plain
// metric always has its one series).
func collectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge"
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// readDesc returns a descriptor's name and sorted label names (constant and
// variable). client_golang exposes them only through String().
func readDesc(t *testing.T, d *prometheus.Desc) (string, []string) {
	t.Helper()
	s := d.String()
	m := descName.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("cannot read descriptor %s", s)
	}
	var labels []string
	if c := descConst.FindStringSubmatch(s); c != nil {
		for _, l := range constLabel.FindAllStringSubmatch(c[1], -1) {
			labels = append(labels, l[1])
		}
	}
	if v := descVar.FindStringSubmatch(s); v != nil && v[1] != "" {
		for _, l := range strings.Split(v[1], ",") {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"))
		}
	}
	sort.Strings(labels)
	return m[1], labels
}

// docRow is a row of docs/metrics.md's table: the metric, its type and its
// labels column.
type docRow struct{ name, typ, labels string }

// metricsDoc reads the rows of docs/metrics.md's table.
func metricsDoc(t *testing.T) []docRow {
	t.Helper()
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(knowledge_sidecar_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
	var rows []docRow
	for _, line := range strings.Split(string(raw), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows = append(rows, docRow{name: m[1], typ: m[2], labels: m[3]})
		}
	}
	return rows
}

// documented reads docs/metrics.md's table: name → type and label names
// (the backticked words of the labels column).
func documented(t *testing.T) map[string]exported {
	t.Helper()
	tick := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]exported{}
	for _, r := range metricsDoc(t) {
		var labels []string
		for _, l := range tick.FindAllStringSubmatch(r.labels, -1) {
			labels = append(labels, l[1])
		}
		sort.Strings(labels)
		out[r.name] = exported{labels: labels, typ: r.typ}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no table rows found")
	}
	return out
}

// TestMetricsReference: docs/metrics.md lists exactly the exported metrics,
// with their types and label names. The failure names every metric missing
// from the document and every documented metric that is not exported, so
// metrics added in parallel branches are reconciled in one go.
func TestMetricsReference(t *testing.T) {
	got, doc := exportedMetrics(t), documented(t)
	var missing, extra, wrong []string
	for name, e := range got {
		d, ok := doc[name]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%s, labels %v)", name, e.typ, e.labels))
		case d.typ != e.typ || !slices.Equal(d.labels, e.labels):
			wrong = append(wrong, fmt.Sprintf("%s: documented %s %v; exported %s %v", name, d.typ, d.labels, e.typ, e.labels))
		}
	}
	for name := range doc {
		if _, ok := got[name]; !ok {
			extra = append(extra, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(wrong)
	if len(missing)+len(extra)+len(wrong) > 0 {
		t.Errorf("docs/metrics.md is out of date:\n  exported but not documented: %v\n  documented but not exported: %v\n  documented differently: %v",
			strings.Join(missing, "; "), strings.Join(extra, "; "), strings.Join(wrong, "; "))
	}
}

// buildForMetrics builds the whole sidecar as serve does (knowledge on, Redis
// ledger) over the fake Core and a fresh catalog, with core.client_app_id set
// to clientAppID ("" for none). No request is served.
func buildForMetrics(t *testing.T, clientAppID string) *sidecar.App {
	t.Helper()
	db := testdb.New(t)
	const serviceToken = "svc_metrics-test-service-token-0123456789abcdef"
	core := fakecore.New(fakecore.Options{ServiceToken: serviceToken})
	srv := httptest.NewServer(core)
	t.Cleanup(func() { core.Close(); srv.Close() })
	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token, cfg.Catalog.DSN, cfg.Rollout = srv.URL, serviceToken, db.ReadOnlyDSN, "all"
	cfg.Ledger.RedisURL = testdb.RedisURL(t)
	cfg.Core.ClientAppID = clientAppID
	cfg.Audit.Enabled, cfg.Audit.File = true, filepath.Join(t.TempDir(), "audit.jsonl") // its metrics exist with it
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatal(err)
	}
	a, err := sidecar.Build(context.Background(), cfg, sidecar.Deps{Version: version})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(a.Close)
	return a
}

// closedSets reads docs/metrics.md's labels column: for every metric whose
// labels all have a closed set ("`label` ∈ a, b, c", or "`label` (as above)"
// for the set of the same label in an earlier row), label → values. Metrics
// with an open label (a status code, a version) are left out.
func closedSets(t *testing.T) map[string]map[string][]string {
	t.Helper()
	seg := regexp.MustCompile("^\\s*`([a-z_]+)`\\s*(.*)$")
	parens := regexp.MustCompile(`\([^()]*\)`)
	ident := regexp.MustCompile(`^[A-Za-z0-9_/]+$`) // "/": MCP method names (tools/call)
	above := map[string][]string{}
	out := map[string]map[string][]string{}
	for _, r := range metricsDoc(t) {
		if strings.TrimSpace(r.labels) == "—" {
			continue
		}
		col := strings.ReplaceAll(r.labels, "(as above)", "∈ @above")
		col = parens.ReplaceAllString(col, "")
		sets := map[string][]string{}
		closed := true
		for _, part := range strings.Split(col, ";") {
			sm := seg.FindStringSubmatch(part)
			if sm == nil {
				t.Fatalf("docs/metrics.md %s: cannot read the label part %q", r.name, part)
			}
			label, rest := sm[1], strings.TrimSpace(sm[2])
			vals, ok := strings.CutPrefix(rest, "∈")
			if !ok {
				closed = false // an open label: the metric has no fixed series
				continue
			}
			if strings.TrimSpace(vals) == "@above" {
				if above[label] == nil {
					t.Fatalf("docs/metrics.md %s: `%s` (as above) has no earlier set", r.name, label)
				}
				sets[label] = above[label]
				continue
			}
			var list []string
			for _, v := range strings.Split(vals, ",") {
				v = strings.TrimSpace(v)
				if !ident.MatchString(v) {
					t.Fatalf("docs/metrics.md %s: `%s` value %q is not a label value (keep prose in parentheses)", r.name, label, v)
				}
				list = append(list, v)
			}
			sets[label], above[label] = list, list
		}
		if closed && len(sets) > 0 {
			out[r.name] = sets
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no closed label sets found")
	}
	return out
}

// TestMetricsZeroAtStart scrapes a freshly built sidecar (knowledge on, as
// `serve` builds it, no request served): every metric whose labels all have a
// closed set has a series for every documented value of every label
// (client_golang's advice: alert expressions and panels then read 0, not "no
// data", before the first event), and no series with an undocumented value.
func TestMetricsZeroAtStart(t *testing.T) {
	a := buildForMetrics(t, "")
	fams, err := a.Server.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	seen := map[string]map[string]map[string]bool{} // metric → label → values with a series
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if seen[f.GetName()] == nil {
					seen[f.GetName()] = map[string]map[string]bool{}
				}
				if seen[f.GetName()][l.GetName()] == nil {
					seen[f.GetName()][l.GetName()] = map[string]bool{}
				}
				seen[f.GetName()][l.GetName()][l.GetValue()] = true
			}
		}
	}
	var names []string
	sets := closedSets(t)
	for name := range sets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for label, values := range sets[name] {
			var missing []string
			for _, v := range values {
				if !seen[name][label][v] {
					missing = append(missing, v)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s{%s}: no series at start for %v", name, label, missing)
			}
			for v := range seen[name][label] {
				if !slices.Contains(values, v) {
					t.Errorf("%s{%s=%q}: a series with a value docs/metrics.md does not list", name, label, v)
				}
			}
		}
	}
}
