package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSecretsListed: the list of secrets is the list of settings kept out of
// the YAML file. Every leaf tagged yaml:"-" is a listed secret and every
// listed secret is such a leaf; each one's environment variable and file
// setting are the ones Load reads, the file refuses its key, and its file
// setting fills it.
func TestSecretsListed(t *testing.T) {
	cfg := Defaults()
	var outOfFile []string // secret paths found by reflection
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := 0; i < v.NumField(); i++ {
			sf, fv := v.Type().Field(i), v.Field(i)
			name := strings.Split(sf.Tag.Get("yaml"), ",")[0]
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
				walk(fv, join(prefix, name))
				continue
			}
			if name != "-" {
				continue
			}
			s, ok := secretAt(&cfg, fv)
			if !ok {
				t.Errorf("%s.%s is kept out of the file (yaml:\"-\") but is not in the list of secrets", prefix, sf.Name)
				continue
			}
			outOfFile = append(outOfFile, s.Path)
		}
	}
	walk(reflect.ValueOf(&cfg).Elem(), "")
	var listed []string
	for _, s := range Secrets() {
		listed = append(listed, s.Path)
	}
	if !slices.Equal(outOfFile, listed) {
		t.Errorf("secrets by reflection %q; listed %q", outOfFile, listed)
	}

	envs, paths := EnvNames(), Paths()
	dir := t.TempDir()
	for _, s := range Secrets() {
		if got := envs[s.Env]; got != s.Path {
			t.Errorf("%s: %s sets %q; want the secret", s.Path, s.Env, got)
		}
		if slices.Contains(paths, s.Path) {
			t.Errorf("%s: listed as a file setting", s.Path)
		}
		if !slices.Contains(paths, s.File) || envs[EnvPrefix+strings.ToUpper(strings.ReplaceAll(s.File, ".", "_"))] != s.File {
			t.Errorf("%s: its file setting %s is not a setting of the file and the environment", s.Path, s.File)
		}
		// The file refuses the key.
		section, key, _ := strings.Cut(s.Path, ".")
		f := filepath.Join(dir, section+".yaml")
		if err := os.WriteFile(f, []byte(section+":\n  "+key+": must-not-be-echoed\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(f, noEnv)
		if want := s.Path + ": line 2: secrets are not accepted in the file; set " + s.Hint(); err == nil || !strings.Contains(err.Error(), want) ||
			strings.Contains(err.Error(), "must-not-be-echoed") {
			t.Errorf("%s in the file: got %v; want %q", s.Path, err, want)
		}
		// The environment sets it, the file setting fills it.
		cfg, err := Load("", envOf(map[string]string{s.Env: "from-env"}))
		if err != nil || *s.value(&cfg) != "from-env" {
			t.Errorf("%s from %s: got %q, %v", s.Path, s.Env, *s.value(&cfg), err)
		}
		secretFile := filepath.Join(dir, section+".secret")
		if err := os.WriteFile(secretFile, []byte("from-file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fileEnv := EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.File, ".", "_"))
		cfg, err = Load("", envOf(map[string]string{fileEnv: secretFile}))
		if err != nil || *s.value(&cfg) != "from-file" {
			t.Errorf("%s from %s: got %q, %v", s.Path, s.File, *s.value(&cfg), err)
		}
		// Marked secret among the fields, so that no environment problem
		// echoes its value.
		for _, f := range fields(&cfg) {
			if f.path == s.Path && !f.secret {
				t.Errorf("%s: not marked secret among the fields", s.Path)
			}
		}
	}
}
