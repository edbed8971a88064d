package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFingerprintLeavesSecretsOut: the canonical document has the YAML keys
// and no secret, a secret's change does not move the fingerprint, and a
// non-secret change does.
func TestFingerprintLeavesSecretsOut(t *testing.T) {
	cfg := Defaults()
	cfg.Core.URL = "https://core.internal"
	base := cfg.Fingerprint()
	if len(base) != 64 {
		t.Fatalf("got fingerprint %q; want 64 hex digits", base)
	}
	var doc map[string]any
	if err := json.Unmarshal(cfg.Canonical(), &doc); err != nil {
		t.Fatal(err)
	}
	core, _ := doc["core"].(map[string]any)
	if core["url"] != "https://core.internal" || core["timeout"] != "3s" {
		t.Errorf("got core %v; want url and timeout \"3s\" by their YAML keys", core)
	}
	if _, ok := core["token"]; ok {
		t.Errorf("the canonical document has core.token")
	}

	withSecrets := cfg
	withSecrets.Core.Token = "svc-token-value-123"
	withSecrets.Catalog.DSN = "ro:dbpass@tcp(db:3306)/core"
	withSecrets.Signing.Keys = "k1:c2VjcmV0"
	withSecrets.Ledger.RedisURL = "redis://:redispass@redis:6379/0"
	if got := withSecrets.Fingerprint(); got != base {
		t.Errorf("got fingerprint %s after setting secrets; want %s (secrets are left out)", got, base)
	}
	canon := string(withSecrets.Canonical())
	for _, s := range []string{"svc-token-value-123", "dbpass", "c2VjcmV0", "redispass"} {
		if strings.Contains(canon, s) {
			t.Errorf("the canonical document shows a secret: %s", canon)
		}
	}

	changed := cfg
	changed.Rollout = "all"
	if changed.Fingerprint() == base {
		t.Errorf("got the same fingerprint for rollout all and off")
	}
}
