package config

// Load is LoadWithWarnings without the warnings, for the tests.
func Load(path string, env LookupEnv) (Config, error) {
	cfg, _, err := LoadWithWarnings(path, env)
	return cfg, err
}

// Secrets returns the secret settings (a copy of the one list).
func Secrets() []Secret { return append([]Secret(nil), secrets[:]...) }
