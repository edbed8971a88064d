package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// fileReport is what decoding a file found besides the values: problems
// (each "path: message", never a Go type name nor a secret's value) and
// warnings (legal but probably not what the operator meant).
type fileReport struct {
	problems []string
	warnings []string
}

// decodeFile decodes raw into cfg leaf by leaf, so that one bad value or
// unknown key does not hide the others. Only a YAML syntax error is fatal.
func decodeFile(raw []byte, cfg *Config) (fileReport, error) {
	var rep fileReport
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return rep, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind == 0 || root.Kind == yaml.DocumentNode || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") ||
		(root.Kind == yaml.MappingNode && len(root.Content) == 0) {
		rep.warnings = append(rep.warnings, "the file is empty: every setting is its default or comes from the environment")
		return rep, nil
	}
	if root.Kind != yaml.MappingNode {
		rep.problems = append(rep.problems, fmt.Sprintf("line %d: the file must be a mapping of settings such as \"core:\" and \"rollout:\"", root.Line))
		return rep, nil
	}
	hasRollout := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "rollout" {
			hasRollout = true
		}
	}
	if !hasRollout {
		rep.warnings = append(rep.warnings, "rollout: not set in the file: the protocol is off for every workspace unless KNOWLEDGE_SIDECAR_ROLLOUT sets it")
	}
	decodeStruct(root, reflect.ValueOf(cfg).Elem(), "", &rep)
	return rep, nil
}

func decodeStruct(n *yaml.Node, v reflect.Value, prefix string, rep *fileReport) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		rep.problems = append(rep.problems, fmt.Sprintf("%s: line %d: must be a mapping of settings", prefix, n.Line))
		return
	}
	t := v.Type()
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		path := join(prefix, key.Value)
		idx := -1
		for j := 0; j < t.NumField(); j++ {
			if name := strings.Split(t.Field(j).Tag.Get("yaml"), ",")[0]; name == key.Value && name != "-" {
				idx = j
				break
			}
		}
		if idx < 0 {
			if s, ok := secretOf(path); ok {
				rep.problems = append(rep.problems, fmt.Sprintf("%s: line %d: secrets are not accepted in the file; set %s", path, key.Line, s.Hint()))
				continue
			}
			msg := fmt.Sprintf("%s: line %d: unknown setting", path, key.Line)
			if s := suggest(path); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			rep.problems = append(rep.problems, msg)
			continue
		}
		fv := v.Field(idx)
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
			decodeStruct(val, fv, path, rep)
			continue
		}
		// Decode into a scratch value so that a bad value leaves the default.
		tmp := reflect.New(fv.Type())
		tmp.Elem().Set(fv)
		if err := val.Decode(tmp.Interface()); err != nil {
			rep.problems = append(rep.problems, fmt.Sprintf("%s: line %d: %s is not %s", path, val.Line, shown(val), expected(fv)))
			continue
		}
		fv.Set(tmp.Elem())
	}
}

// shown is the offending value of a leaf that could not be decoded, for a
// message: a scalar quoted like Validate quotes values (cut, control
// characters escaped), else what it is. Secrets are never decoded from the
// file (their keys are refused before), so no secret gets here; a section
// given a scalar ("must be a mapping of settings") is not quoted, since
// `signing: id:SECRET` is an easy mistake.
func shown(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return quote(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return "the value"
	}
}

// expected says what a leaf accepts, in operator words, the way the
// environment's messages say it.
func expected(v reflect.Value) string {
	switch v.Interface().(type) {
	case time.Duration:
		return "a duration such as 5s or 2m"
	case []string:
		return "a list of strings"
	}
	switch v.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Uint32:
		return "a non-negative integer"
	case reflect.Float64:
		return "a number"
	default:
		return "a string"
	}
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// Paths returns every setting's path in the file (secrets excluded: they
// have no key there), sorted.
func Paths() []string {
	cfg := Defaults()
	var out []string
	for _, f := range fields(&cfg) {
		if !f.secret {
			out = append(out, f.path)
		}
	}
	// Mapping keys are settings too (core, core.identity_breaker, …).
	seen := map[string]bool{}
	for _, p := range out {
		for i := strings.Index(p, "."); i >= 0; i = nextDot(p, i) {
			if !seen[p[:i]] {
				seen[p[:i]] = true
				out = append(out, p[:i])
			}
		}
	}
	sort.Strings(out)
	return out
}

func nextDot(s string, i int) int {
	j := strings.Index(s[i+1:], ".")
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// suggest returns the known path closest to an unknown one, or "" when none
// is close: the same last segment elsewhere (timeout → core.timeout), else
// the smallest edit distance within a third of the length.
func suggest(path string) string {
	known := Paths()
	leaf := path[strings.LastIndex(path, ".")+1:]
	best, bestD := "", len(path)/3+1
	for _, k := range known {
		if k[strings.LastIndex(k, ".")+1:] == leaf && !strings.Contains(path, ".") {
			return k
		}
		if d := distance(path, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// suggestName is suggest for environment variable names.
func suggestName(name string, known []string) string {
	best, bestD := "", len(name)/4+1
	for _, k := range known {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of two ASCII-ish strings.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownEnv lists the KNOWLEDGE_SIDECAR_* variables of environ (os.Environ's
// shape) that nothing reads, each with a suggestion when one is close. The
// values are never repeated. extra names variables read outside Config
// (KNOWLEDGE_SIDECAR_CONFIG is always known).
func UnknownEnv(environ []string, extra ...string) []string {
	known := []string{EnvPrefix + "CONFIG"}
	known = append(known, extra...)
	for name := range EnvNames() {
		known = append(known, name)
	}
	sort.Strings(known)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		i := sort.SearchStrings(known, name)
		if i < len(known) && known[i] == name {
			continue
		}
		msg := name + ": unknown environment variable"
		if s := suggestName(name, known); s != "" {
			msg += " (did you mean " + s + "?)"
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}
