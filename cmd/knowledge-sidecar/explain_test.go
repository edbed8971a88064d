package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestCheckConfigRoute: check-config --route says whether a route is
// served and why — allow-listed and found with its knowledge bases, not
// rolled out, and on both sides of its percent threshold — from the
// configuration and the catalog, without a running sidecar; a malformed key
// exits 2; the DSN never shows.
func TestCheckConfigRoute(t *testing.T) {
	db := testdb.New(t)
	cleanEnv(t)
	t.Setenv("KNOWLEDGE_SIDECAR_CORE_TOKEN", "svc-route-test-token-0123456789")
	t.Setenv("KNOWLEDGE_SIDECAR_CATALOG_DSN", db.ReadOnlyDSN)
	cfgPath := filepath.Join(t.TempDir(), "sidecar.yaml")
	from := int(rollout.Bucket(testdb.RouteMulti)/100 + 1)
	for _, tc := range []struct {
		name, rollout, native, route string
		code                         int
		want                         []string
	}{
		{"served", "allow:" + testdb.RouteMulti, "never", testdb.RouteMulti, 0, []string{
			"served:           true — served: rolled out",
			"native detection: never, verdict legacy",
			"catalog:          route found, enabled true; knowledge bases: faq enabled, manuals enabled, kb-disabled disabled, kb-missing deleted",
			"oversized docs:   1 over the 131072-byte read chain (GET /-/explain lists them",
		}},
		{"not rolled out", "allow:" + testdb.RouteMulti, "auto", testdb.RouteLegacy, 0, []string{
			"served:           false — not served: not rolled out",
			`"` + testdb.RouteLegacy + `" is not in the allow list`,
			"verdict unknown (auto probes Core at run time",
		}},
		{"unknown route", "all", "never", "no-such-route", 0, []string{
			"served:           true", "Core has no such route", `no route "no-such-route" in Core's catalog`,
		}},
		{"percent at its threshold", "percent:" + strconv.Itoa(from), "never", testdb.RouteMulti, 0, []string{
			"served:           true", "bucket " + strconv.FormatUint(rollout.Bucket(testdb.RouteMulti), 10) + " is below", "served from percent:" + strconv.Itoa(from) + " on",
		}},
		{"percent below its threshold", "percent:" + strconv.Itoa(from-1), "never", testdb.RouteMulti, 0, []string{
			"served:           false", "is not below",
		}},
		{"native", "all", "always", testdb.RouteMulti, 0, []string{
			"served:           false — not served: Core serves the protocol itself",
		}},
		{"malformed", "all", "never", "Bad Route", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "core:\n  url: http://core.internal:8000\nrollout: \"" + tc.rollout + "\"\nnative_detection: " + tc.native + "\n"
			if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI("check-config", "--config", cfgPath, "--route", tc.route)
			if code != tc.code {
				t.Fatalf("exit: got %d; want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if tc.code == 2 && !strings.Contains(stderr, "is not a route key") {
				t.Errorf("stderr: got %q; want the key refused", stderr)
			}
			if strings.Contains(stdout+stderr, db.ReadOnlyDSN) {
				t.Errorf("the output shows the DSN")
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		body := "core:\n  url: http://core.internal:8000\nrollout: \"percent:" + strconv.Itoa(from) + "\"\nnative_detection: never\n"
		if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI("check-config", "--config", cfgPath, "--route", testdb.RouteMulti, "--json")
		var ex sidecar.Explanation
		if err := json.Unmarshal([]byte(stdout), &ex); code != 0 || err != nil {
			t.Fatalf("exit %d, %v; want 0 and the JSON alone on stdout:\n%s%s", code, err, stdout, stderr)
		}
		if !ex.Served || ex.Rollout.Bucket == nil || *ex.Rollout.Bucket != rollout.Bucket(testdb.RouteMulti) || !ex.Catalog.Found {
			t.Errorf("got %+v; want served, its bucket, found", ex)
		}
	})
}
