package rollout

import "fmt"

// Decision is why a policy does (not) roll the protocol out for one route:
// what `check-config --route` and the admin listener's /-/explain show.
type Decision struct {
	Enabled bool   `json:"enabled"`
	Rule    string `json:"rule"` // the canonical spec, String()
	Reason  string `json:"reason"`
	// Bucket and Threshold are set for a percent policy: the route is
	// enabled when Bucket < Threshold (percent × 100), and from percent
	// MinPercent on.
	Bucket     *uint64 `json:"bucket,omitempty"`
	Threshold  *uint64 `json:"threshold,omitempty"`
	MinPercent *uint64 `json:"enabled_from_percent,omitempty"`
}

// Bucket is the route's stable bucket in 0–9999 (the package documentation
// gives the formula): under percent:N it is enabled when Bucket < N × 100.
func Bucket(route string) uint64 { return bucket(route) }

// Explain decides for route as Enabled does and says why.
func (p Policy) Explain(route string) Decision {
	d := Decision{Enabled: p.Enabled(route), Rule: p.String()}
	switch p.Mode() {
	case ModeOff:
		d.Reason = "rollout is off: every workspace is passed through"
	case ModeAll:
		d.Reason = "rollout is all: every workspace is served"
	case ModeAllow:
		if d.Enabled {
			d.Reason = fmt.Sprintf("%q is in the allow list", route)
		} else {
			d.Reason = fmt.Sprintf("%q is not in the allow list", route)
		}
	case ModeDeny:
		if d.Enabled {
			d.Reason = fmt.Sprintf("%q is not in the deny list", route)
		} else {
			d.Reason = fmt.Sprintf("%q is in the deny list", route)
		}
	case ModePercent:
		b, th := bucket(route), uint64(p.percent)*100
		from := b/100 + 1
		d.Bucket, d.Threshold, d.MinPercent = &b, &th, &from
		if d.Enabled {
			d.Reason = fmt.Sprintf("bucket %d is below %d (percent:%d); served from percent:%d on", b, th, p.percent, from)
		} else {
			d.Reason = fmt.Sprintf("bucket %d is not below %d (percent:%d); served from percent:%d on", b, th, p.percent, from)
		}
	}
	return d
}
