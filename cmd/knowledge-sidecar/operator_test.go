package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bailinghub/knowledge-sidecar/config"
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

// TestExampleConfig: deploy/knowledge-sidecar.example.yaml is accepted by
// check-config without warnings and names every setting of the file (so a
// new setting without an annotated example fails here, naming it).
func TestExampleConfig(t *testing.T) {
	const example = "../../deploy/knowledge-sidecar.example.yaml"
	cleanEnv(t)
	t.Setenv("KNOWLEDGE_SIDECAR_CORE_TOKEN", "svc_example-service-token-0123456789abcdef")
	t.Setenv("KNOWLEDGE_SIDECAR_CATALOG_DSN", "ro:pw@tcp(db:3306)/bailinghub")
	code, stdout, stderr := runCLI("check-config", "--config", example)
	if code != 0 || stdout != "configuration is valid\n" || stderr != "" {
		t.Fatalf("check-config: got exit %d, stdout %q, stderr %q; want 0, \"configuration is valid\" and no warning", code, stdout, stderr)
	}

	raw, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		present[prefix] = true
		if m, ok := v.(map[string]any); ok {
			for k, c := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
		}
	}
	walk("", doc)
	var missing []string
	for _, p := range config.Paths() {
		if !present[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the example does not show these settings: %s", strings.Join(missing, ", "))
	}
}

// TestDeployExamples: the systemd unit reloads with SIGHUP and checks the
// file before starting (the Kubernetes overlay: deploy_test.go).
func TestDeployExamples(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/knowledge-sidecar.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nExecReload=/bin/kill -HUP $MAINPID\n",
		"\nExecStartPre=/usr/local/bin/knowledge-sidecar check-config --config /etc/knowledge-sidecar/sidecar.yaml\n",
		"\nExecStart=/usr/local/bin/knowledge-sidecar serve --config /etc/knowledge-sidecar/sidecar.yaml\n",
		"\nEnvironmentFile=/etc/knowledge-sidecar/secrets.env\n",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("systemd unit: want line %q", strings.TrimSpace(want))
		}
	}
}

// TestTroubleshootingCoversCodesAndLogs: docs/troubleshooting.md has a
// section for every error code the sidecar answers with and every warning or
// error log message it writes (read from the source, so a new one without an
// explanation fails here, named).
func TestTroubleshootingCoversCodesAndLogs(t *testing.T) {
	raw, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	patterns := []*regexp.Regexp{
		regexp.MustCompile(`Code[A-Za-z]+\s*=\s*"([a-z_]+)"`),        // knowledge error codes
		regexp.MustCompile(`writeError\([^,]+,[^,]+,\s*"([a-z_]+)"`), // edge error codes
		regexp.MustCompile(`\{"error":"([a-z_]+)"`),                  // literal bodies (turn_conflict)
		regexp.MustCompile(`return "(upstream_[a-z_]+)"`),            // upstreamCode
		// log messages; a "…" + "…" concatenation is read as one message
		regexp.MustCompile(`\.(?:Warn|Error)\(\s*((?:"[^"]*"\s*\+\s*)*"[^"]+")`),
		regexp.MustCompile(`LogAttrs\([^,]+,\s*slog\.Level(?:Warn|Error),\s*((?:"[^"]*"\s*\+\s*)*"[^"]+")`),
	}
	concat := regexp.MustCompile(`"\s*\+\s*"`)
	var missing []string
	seen := map[string]bool{}
	for _, dir := range []string{"../../proxy", "../../knowledge", "../../coreclient", "../../catalog", "../../breaker", "../../corefacts", "../../ledger", "../../rollout", "."} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, re := range patterns {
				for _, m := range re.FindAllStringSubmatch(string(src), -1) {
					s := strings.Trim(concat.ReplaceAllString(m[1], ""), `"`)
					if seen[s] {
						continue
					}
					seen[s] = true
					if !strings.Contains(doc, "`"+s+"`") {
						missing = append(missing, fmt.Sprintf("%q (%s)", s, filepath.Base(f)))
					}
				}
			}
		}
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d codes and messages in the source; the patterns are broken", len(seen))
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/troubleshooting.md does not explain: %s", strings.Join(missing, ", "))
	}
}
