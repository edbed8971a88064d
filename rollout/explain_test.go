package rollout

import (
	"strconv"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	b := Bucket("order-assistant")
	from := int(b/100 + 1)
	for _, tc := range []struct {
		spec, route string
		enabled     bool
		reason      string
	}{
		{"off", "order-assistant", false, "rollout is off"},
		{"all", "order-assistant", true, "rollout is all"},
		{"allow:order-assistant", "order-assistant", true, `"order-assistant" is in the allow list`},
		{"allow:other", "order-assistant", false, `"order-assistant" is not in the allow list`},
		{"deny:order-assistant", "order-assistant", false, `"order-assistant" is in the deny list`},
		{"percent:" + strconv.Itoa(from), "order-assistant", true, "is below"},
		{"percent:" + strconv.Itoa(from-1), "order-assistant", false, "is not below"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			p, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			d := p.Explain(tc.route)
			if d.Enabled != tc.enabled || d.Enabled != p.Enabled(tc.route) || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("got %+v; want enabled %v and a reason with %q", d, tc.enabled, tc.reason)
			}
			if p.Mode() == ModePercent && (d.Bucket == nil || *d.Bucket != b || *d.MinPercent != uint64(from)) {
				t.Errorf("got bucket %v from %v; want %d from %d", d.Bucket, d.MinPercent, b, from)
			}
		})
	}
}
