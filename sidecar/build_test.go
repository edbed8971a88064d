package sidecar

import (
	"reflect"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/config"
)

func TestRestartOnlyNamesChangedSettings(t *testing.T) {
	base := config.Defaults()
	base.Core.URL = "http://core:1"
	cases := []struct {
		name   string
		change func(*config.Config)
		want   []string
	}{
		{"reloadable only", func(c *config.Config) { c.Rollout = "all"; c.Log.Level = "debug" }, nil},
		{"turn_hints is reloadable", func(c *config.Config) { c.TurnHints = !c.TurnHints }, nil},
		{"core token", func(c *config.Config) { c.Core.Token = "new-secret" }, []string{"core"}},
		{"catalog and ledger", func(c *config.Config) { c.Catalog.MaxOpenConns = 3; c.Ledger.TTL = 1 }, []string{"catalog", "ledger"}},
		{"listen", func(c *config.Config) { c.Listen = ":9" }, []string{"listen"}},
		{"signing keys", func(c *config.Config) { c.Signing.Keys = "k:x" }, []string{"signing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := base
			tc.change(&next)
			if got := restartOnly(base, next); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v; want %v", got, tc.want)
			}
		})
	}
}
