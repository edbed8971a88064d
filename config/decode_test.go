package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadWarnings(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"empty file", "", []string{"the file is empty: every setting is its default or comes from the environment"}},
		{"only a comment", "# nothing yet\n", []string{"the file is empty: every setting is its default or comes from the environment"}},
		{"empty mapping", "{}\n", []string{"the file is empty: every setting is its default or comes from the environment"}},
		{"no rollout", "core:\n  url: http://core:3000\n", []string{"rollout: not set in the file: the protocol is off for every workspace unless KNOWLEDGE_SIDECAR_ROLLOUT sets it"}},
		{"rollout set", "core:\n  url: http://core:3000\nrollout: \"off\"\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, got, err := LoadWithWarnings(p, noEnv)
			if err != nil {
				t.Fatalf("got error %v; want none", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got warnings %q; want %q", got, tc.want)
			}
		})
	}
}

func TestLoadNotAMapping(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("- core\n- rollout\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, noEnv)
	want := "invalid configuration:\n  line 1: the file must be a mapping of settings such as \"core:\" and \"rollout:\""
	if err == nil || err.Error() != want {
		t.Errorf("got %v; want %q", err, want)
	}
}

func TestLoadKeepsDefaultOnBadValue(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("core:\n  timeout: soon\n  url: http://core:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(p, noEnv)
	if err == nil {
		t.Fatal("got no error; want core.timeout listed")
	}
	if cfg.Core.Timeout != Defaults().Core.Timeout || cfg.Core.URL != "http://core:1" {
		t.Errorf("got timeout %s url %q; want the default and the file's URL", cfg.Core.Timeout, cfg.Core.URL)
	}
}

func TestUnknownEnv(t *testing.T) {
	environ := []string{
		"PATH=/bin",
		"KNOWLEDGE_SIDECAR_ROLLOUT=all",
		"KNOWLEDGE_SIDECAR_ROLLOUTS=secret-looking-value",
		"KNOWLEDGE_SIDECAR_CONFIG=/etc/ks.yaml",
		"KNOWLEDGE_SIDECAR_CORE_TOKN=abc",
		"KNOWLEDGE_SIDECAR_MADE_UP_THING=1",
		"KNOWLEDGE_SIDECAR_EXTRA=1",
	}
	got := UnknownEnv(environ, "KNOWLEDGE_SIDECAR_EXTRA")
	want := []string{
		"KNOWLEDGE_SIDECAR_CORE_TOKN: unknown environment variable (did you mean KNOWLEDGE_SIDECAR_CORE_TOKEN?)",
		"KNOWLEDGE_SIDECAR_MADE_UP_THING: unknown environment variable",
		"KNOWLEDGE_SIDECAR_ROLLOUTS: unknown environment variable (did you mean KNOWLEDGE_SIDECAR_ROLLOUT?)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSuggest(t *testing.T) {
	cases := map[string]string{
		"core.tiemout":          "core.timeout",
		"rollouts":              "rollout",
		"timeout":               "core.timeout",
		"ledger.backnd":         "ledger.backend",
		"completely_unrelated":  "",
		"core.identity_breaker": "core.identity_breaker", // a mapping key is known
	}
	for in, want := range cases {
		if got := suggest(in); got != want {
			t.Errorf("suggest(%q): got %q; want %q", in, got, want)
		}
	}
}

// TestDecodeQuotesValues: a value of the file or of the environment that
// does not parse is quoted (cut like Validate's quotes), a mapping or list
// given for a leaf is named, and a section given a scalar is not quoted
// (`signing: id:SECRET` must not show the secret).
func TestDecodeQuotesValues(t *testing.T) {
	long := strings.Repeat("9", 100)
	p := filepath.Join(t.TempDir(), "c.yaml")
	body := "core:\n  url: http://core:1\n  timeout: {a: 1}\n  identity_breaker:\n    failures: [1]\n" +
		"proxy:\n  max_connections: " + long + "x\nsigning: k1:c2VjcmV0LXNoaGg\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, envOf(map[string]string{"KNOWLEDGE_SIDECAR_LOG_ACCESS": "yes please"}))
	want := []string{
		"core.timeout: line 3: a mapping is not a duration such as 5s or 2m",
		"core.identity_breaker.failures: line 5: a list is not a non-negative integer",
		`proxy.max_connections: line 7: "` + strings.Repeat("9", quoteMax) + `"… is not an integer`,
		"signing: line 8: must be a mapping of settings",
		`KNOWLEDGE_SIDECAR_LOG_ACCESS: "yes please" is not a boolean (true or false)`,
	}
	var ce *Error
	if !errors.As(err, &ce) || !reflect.DeepEqual(ce.Problems, want) {
		t.Fatalf("got %v; want the problems\n%s", err, strings.Join(want, "\n"))
	}
}
