package config

import (
	"strings"
	"testing"
)

// core.client_app_id: optional (default empty), set from YAML or the
// environment, validated as a Core app_id.
func TestCoreClientAppID(t *testing.T) {
	if got := Defaults().Core.ClientAppID; got != "" {
		t.Errorf("default got %q; want empty (not checked)", got)
	}
	cfg, err := Load("testdata/good.yaml", envOf(map[string]string{"KNOWLEDGE_SIDECAR_CORE_CLIENT_APP_ID": "sidecar-client"}))
	if err != nil || cfg.Core.ClientAppID != "sidecar-client" {
		t.Errorf("env override: got %q, %v; want sidecar-client", cfg.Core.ClientAppID, err)
	}
	tests := []struct {
		id      string
		wantErr bool
	}{
		{"", false},
		{"sidecar-client", false},
		{"App-Case", false},
		{"客户端", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a", 65), true},
		{" sidecar", true},
		{"sidecar ", true},
		{"side\ncar", true},
		{"side\x00car", true},
	}
	for _, tt := range tests {
		c := Defaults()
		c.Core.URL = "http://core.internal:3000"
		c.Core.ClientAppID = tt.id
		err := c.Validate()
		if got := err != nil && strings.Contains(err.Error(), "core.client_app_id"); got != tt.wantErr {
			t.Errorf("client_app_id %q: got error %v; want error %v", tt.id, err, tt.wantErr)
		}
	}
}
