package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every environment variable the sidecar reads.
const EnvPrefix = "KNOWLEDGE_SIDECAR_"

// LookupEnv is os.LookupEnv's shape, injected so tests control the environment.
type LookupEnv func(string) (string, bool)

// LoadWithWarnings builds the configuration: defaults, then the YAML file at
// path (if path is not empty), then environment overrides, then secrets from
// their files. It returns decoding problems; call Validate for semantic ones.
// An unreadable file or a YAML syntax error is fatal (zero Config); every
// other problem (unknown keys, secrets in the file, bad values, environment
// and secret-file problems) comes back as one *Error next to the partly built
// Config, so that Validate's problems can be reported in the same breath.
// It also returns warnings: settings that are legal but probably not meant
// (an empty file, a file without rollout).
func LoadWithWarnings(path string, env LookupEnv) (Config, []string, error) {
	if env == nil {
		env = os.LookupEnv
	}
	cfg := Defaults()
	var problems, warnings []string
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: read %s: %w", path, errors.Unwrap(err))
		}
		rep, err := decodeFile(raw, &cfg)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: %s: %w", path, err)
		}
		problems, warnings = rep.problems, rep.warnings
	}
	for _, err := range []error{applyEnv(&cfg, env), readSecretFiles(&cfg)} {
		var ce *Error
		if errors.As(err, &ce) {
			problems = append(problems, ce.Problems...)
		}
	}
	if len(problems) > 0 {
		return cfg, warnings, &Error{Problems: problems}
	}
	return cfg, warnings, nil
}

// Join merges configuration errors (nil and *Error values) into one *Error.
func Join(errs ...error) error {
	var problems []string
	for _, err := range errs {
		var ce *Error
		switch {
		case err == nil:
		case errors.As(err, &ce):
			problems = append(problems, ce.Problems...)
		default:
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{Problems: problems}
}

// field is one leaf setting with its YAML path and environment name.
type field struct {
	path   string
	env    string
	secret bool
	value  reflect.Value
}

// fields lists every leaf of cfg in declaration order.
func fields(cfg *Config) []field {
	var out []field
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name := strings.Split(sf.Tag.Get("yaml"), ",")[0]
			path := name
			if name == "-" {
				path = strings.ToLower(sf.Name)
			}
			if prefix != "" {
				path = prefix + "." + path
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
				walk(fv, path)
				continue
			}
			if s, ok := secretAt(cfg, fv); ok {
				out = append(out, field{path: s.Path, env: s.Env, secret: true, value: fv})
				continue
			}
			env := EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
			out = append(out, field{path: path, env: env, value: fv})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

// EnvNames returns every environment variable Load reads, with its field path.
func EnvNames() map[string]string {
	cfg := Defaults()
	out := map[string]string{}
	for _, f := range fields(&cfg) {
		out[f.env] = f.path
	}
	return out
}

func applyEnv(cfg *Config, env LookupEnv) error {
	var problems []string
	for _, f := range fields(cfg) {
		raw, ok := env(f.env)
		if !ok {
			continue
		}
		if err := setFromString(f.value, raw); err != nil {
			if f.secret { // never echo a secret's value
				problems = append(problems, fmt.Sprintf("%s: invalid value", f.env))
			} else {
				problems = append(problems, fmt.Sprintf("%s: %v", f.env, err))
			}
		}
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

func setFromString(v reflect.Value, raw string) error {
	raw = strings.TrimSpace(raw)
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return notA(v, raw)
		}
		v.SetInt(int64(d))
		return nil
	case []string:
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return notA(v, raw)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return notA(v, raw)
		}
		v.SetInt(int64(n))
	case reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return notA(v, raw)
		}
		v.SetInt(n)
	case reflect.Uint32:
		n, err := strconv.ParseUint(raw, 10, 32)
		if err != nil {
			return notA(v, raw)
		}
		v.SetUint(n)
	case reflect.Float64:
		n, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return notA(v, raw)
		}
		v.SetFloat(n)
	default:
		return fmt.Errorf("unsupported kind %s", v.Kind())
	}
	return nil
}

// notA is the problem with an environment value that does not parse: the
// value (never a secret's: applyEnv does not show those) and what the
// setting accepts, as the file's messages say it.
func notA(v reflect.Value, raw string) error {
	return errors.New(quote(raw) + " is not " + expected(v))
}

// readSecretFiles fills each secret from its *_file setting when the secret
// itself is not set; setting both is a problem.
func readSecretFiles(cfg *Config) error {
	var problems []string
	for _, s := range secrets {
		path, dst := *s.file(cfg), s.value(cfg)
		if path == "" {
			continue
		}
		if *dst != "" {
			problems = append(problems, fmt.Sprintf("%s: set either the secret or its file, not both", s.File))
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: cannot read %s", s.File, path))
			continue
		}
		*dst = strings.TrimRight(string(raw), "\r\n")
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

// Error lists every configuration problem, each prefixed with its field path.
type Error struct {
	Problems []string
}

// List returns the problems (for callers that cannot import this package).
func (e *Error) List() []string { return e.Problems }

func (e *Error) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}
