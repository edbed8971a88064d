package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const (
	rulesFile     = "../../deploy/prometheus/knowledge-sidecar.rules.yml"
	rulesTestFile = "../../deploy/prometheus/knowledge-sidecar.rules.test.yml"
	dashboardFile = "../../deploy/grafana/knowledge-sidecar.json"
)

// TestAlertRulesPromtool runs `promtool check rules` and `promtool test
// rules` on deploy/prometheus. scripts/test.sh installs promtool (Debian's
// prometheus package) when it is missing; the test skips, visibly, only when
// that was impossible (no apt: KS_PROMTOOL_UNAVAILABLE says why) or outside
// CI. With CI=true a missing promtool fails.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		switch why := os.Getenv("KS_PROMTOOL_UNAVAILABLE"); {
		case why != "":
			t.Skipf("SKIPPED: promtool is not installed and cannot be (%s): alert rules are not unit-tested", why)
		case os.Getenv("CI") == "true":
			t.Fatal("promtool is not installed (CI=true); scripts/test.sh installs it with apt-get install prometheus")
		default:
			t.Skip("SKIPPED: promtool is not installed; run ./scripts/test.sh, which installs it")
		}
	}
	for _, args := range [][]string{
		{"check", "rules", "knowledge-sidecar.rules.yml"},
		{"test", "rules", "knowledge-sidecar.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../../deploy/prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestRulesAndDashboardUseExportedMetrics: every knowledge_sidecar_* name in
// the alert rules, their tests and the dashboard is a metric the sidecar
// exports (a histogram's _bucket/_sum/_count count as its name); the
// dashboard is valid JSON with a query on every graph panel.
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	name := regexp.MustCompile(`knowledge_sidecar_[a-z0-9_]+`)
	for _, file := range []string{rulesFile, rulesTestFile, dashboardFile} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		unknown := map[string]bool{}
		found := 0
		for _, n := range name.FindAllString(string(raw), -1) {
			found++
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && exported[b].typ == "histogram" {
					base = b
				}
			}
			if _, ok := exported[base]; !ok {
				unknown[n] = true
			}
		}
		if found == 0 {
			t.Errorf("%s: no metric names found", file)
		}
		var names []string
		for n := range unknown {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) > 0 {
			t.Errorf("%s uses metrics the sidecar does not export: %s", file, strings.Join(names, ", "))
		}
	}

	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	graphs := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		graphs++
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
	}
	if graphs == 0 {
		t.Error("dashboard: no graph panels")
	}
}
