package config

import (
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
