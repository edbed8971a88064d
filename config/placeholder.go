package config

import (
	"regexp"
	"strings"
)

// placeholderAngle is a "<…>" part of a value: "<Core client token>",
// "redis://:<password>@redis:6379/0".
var placeholderAngle = regexp.MustCompile(`<[^<>]*>`)

// IsPlaceholder reports whether v is still an example's placeholder rather
// than a real value: it has a "<…>" part, or holds "changeme" or
// "replace_me" in any case (with or without "_" or "-"), as templates and
// example Secrets write them. Such a value would otherwise pass check-config
// and fail only at run time (a token Core refuses, a host that does not
// resolve).
func IsPlaceholder(v string) bool {
	if placeholderAngle.MatchString(v) {
		return true
	}
	n := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(v))
	return strings.Contains(n, "changeme") || strings.Contains(n, "replaceme")
}

// placeholderMsg names the field's problem, never its value.
const placeholderMsg = "is still a placeholder (<…>, changeme or REPLACE_ME); set the real value"

// placeholders: every secret, and Core's URL, must not be a placeholder. A
// secret's message says where it is given; no message shows a value.
func (p *problems) placeholders(c *Config) {
	if IsPlaceholder(c.Core.URL) {
		p.add("core.url", placeholderMsg+" (value not shown)")
	}
	for _, s := range secrets {
		if v := *s.value(c); v != "" && IsPlaceholder(v) {
			p.add(s.Path, placeholderMsg+" in "+s.Hint()+" (value not shown)")
		}
	}
}
