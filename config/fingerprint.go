package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Fingerprint is the SHA-256 (hex) of the effective configuration's
// canonical JSON without its secrets (Canonical). Two replicas with the same
// fingerprint run the same non-secret settings; a difference in a secret
// alone (a rotated token, another DSN password) does not show in it: hashing
// secrets would let anyone who reads the status compare them across pods.
func (c Config) Fingerprint() string {
	sum := sha256.Sum256(c.Canonical())
	return hex.EncodeToString(sum[:])
}

// Canonical is the configuration as JSON with the YAML keys, objects' keys
// sorted, durations as Go duration strings ("1m0s"), and every secret
// (Secrets, the settings kept out of the file with yaml:"-") left out, not
// blanked: the document is the same whether a secret is set or not. The
// files naming secrets (core.token_file, …) are paths and are included.
func (c Config) Canonical() []byte {
	raw, err := json.Marshal(canonicalValue(reflect.ValueOf(c)))
	if err != nil { // only maps, slices, strings, numbers and bools: cannot fail
		panic("config: canonical JSON: " + err.Error())
	}
	return raw
}

var durationType = reflect.TypeFor[time.Duration]()

func canonicalValue(v reflect.Value) any {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Struct:
		m := make(map[string]any, v.NumField())
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || name == "" || !f.IsExported() {
				continue // a secret (yaml:"-"), or not a setting
			}
			m[name] = canonicalValue(v.Field(i))
		}
		return m // encoding/json writes map keys sorted
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = canonicalValue(v.Index(i))
		}
		return out
	default:
		return v.Interface()
	}
}
