package main

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// closedSets reads docs/metrics.md's labels column: for every metric whose
// labels all have a closed set ("`label` ∈ a, b, c", or "`label` (as above)"
// for the set of the same label in an earlier row), label → values. Metrics
// with an open label (a status code, a version) are left out.
func closedSets(t *testing.T) map[string]map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(knowledge_sidecar_[a-z0-9_]+)` \\| [a-z]+ \\| ([^|]*) \\|")
	seg := regexp.MustCompile("^\\s*`([a-z_]+)`\\s*(.*)$")
	parens := regexp.MustCompile(`\([^()]*\)`)
	ident := regexp.MustCompile(`^[A-Za-z0-9_/]+$`) // "/": MCP method names (tools/call)
	above := map[string][]string{}
	out := map[string]map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil || strings.TrimSpace(m[2]) == "—" {
			continue
		}
		col := strings.ReplaceAll(m[2], "(as above)", "∈ @above")
		col = parens.ReplaceAllString(col, "")
		sets := map[string][]string{}
		closed := true
		for _, part := range strings.Split(col, ";") {
			sm := seg.FindStringSubmatch(part)
			if sm == nil {
				t.Fatalf("docs/metrics.md %s: cannot read the label part %q", m[1], part)
			}
			label, rest := sm[1], strings.TrimSpace(sm[2])
			vals, ok := strings.CutPrefix(rest, "∈")
			if !ok {
				closed = false // an open label: the metric has no fixed series
				continue
			}
			if strings.TrimSpace(vals) == "@above" {
				if above[label] == nil {
					t.Fatalf("docs/metrics.md %s: `%s` (as above) has no earlier set", m[1], label)
				}
				sets[label] = above[label]
				continue
			}
			var list []string
			for _, v := range strings.Split(vals, ",") {
				v = strings.TrimSpace(v)
				if !ident.MatchString(v) {
					t.Fatalf("docs/metrics.md %s: `%s` value %q is not a label value (keep prose in parentheses)", m[1], label, v)
				}
				list = append(list, v)
			}
			sets[label], above[label] = list, list
		}
		if closed && len(sets) > 0 {
			out[m[1]] = sets
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
