package config

import "reflect"

// Secret is one setting that holds a credential. It is set from its
// environment variable or read from the file its File setting names, never
// from the YAML file (which refuses its key), and its value never appears in
// a message, a log line or a metric.
type Secret struct {
	// Path is the setting as an operator would write it: "core.token".
	Path string
	// Env is the environment variable that sets it.
	Env string
	// File is the setting (a path, not a secret) naming a file that holds it.
	File string

	value, file func(*Config) *string
}

// Hint says where the secret is given: "KNOWLEDGE_SIDECAR_CORE_TOKEN or
// core.token_file".
func (s Secret) Hint() string { return s.Env + " or " + s.File }

// secrets is the one list of secret settings. Loading (environment names,
// the *_file reading, the file's refusal of a secret's key) and every check
// that must not show a value derive from it; TestSecretsListed fails when a
// setting kept out of the YAML file (yaml:"-") is not in it.
var secrets = [...]Secret{
	{"core.token", EnvPrefix + "CORE_TOKEN", "core.token_file",
		func(c *Config) *string { return &c.Core.Token }, func(c *Config) *string { return &c.Core.TokenFile }},
	{"catalog.dsn", EnvPrefix + "CATALOG_DSN", "catalog.dsn_file",
		func(c *Config) *string { return &c.Catalog.DSN }, func(c *Config) *string { return &c.Catalog.DSNFile }},
	{"signing.keys", EnvPrefix + "SIGNING_KEYS", "signing.keys_file",
		func(c *Config) *string { return &c.Signing.Keys }, func(c *Config) *string { return &c.Signing.KeysFile }},
	{"ledger.redis_url", EnvPrefix + "LEDGER_REDIS_URL", "ledger.redis_url_file",
		func(c *Config) *string { return &c.Ledger.RedisURL }, func(c *Config) *string { return &c.Ledger.RedisURLFile }},
	{"audit.query_hmac_key", EnvPrefix + "AUDIT_QUERY_HMAC_KEY", "audit.query_hmac_key_file",
		func(c *Config) *string { return &c.Audit.QueryHMACKey }, func(c *Config) *string { return &c.Audit.QueryHMACKeyFile }},
}

// secretOf returns the secret whose setting is path.
func secretOf(path string) (Secret, bool) {
	for _, s := range secrets {
		if s.Path == path {
			return s, true
		}
	}
	return Secret{}, false
}

// secret is secretOf for a path known to be listed (messages naming where a
// secret is given).
func secret(path string) Secret {
	s, ok := secretOf(path)
	if !ok {
		panic("config: " + path + " is not a listed secret")
	}
	return s
}

// secretAt returns the secret held by field v of cfg (v addressable).
func secretAt(cfg *Config, v reflect.Value) (Secret, bool) {
	if v.Kind() != reflect.String || !v.CanAddr() {
		return Secret{}, false
	}
	for _, s := range secrets {
		if reflect.ValueOf(s.value(cfg)).Pointer() == v.Addr().Pointer() {
			return s, true
		}
	}
	return Secret{}, false
}
