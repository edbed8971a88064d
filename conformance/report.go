package conformance

import (
	"encoding/json"
	"fmt"
	"io"
)

// Status of one check.
type Status string

// Check outcomes. A check that could not be observed is skipped, never passed.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one check: a stable name, the rule it tests (worded so that a
// failure names the rule), its status and, for fail and skip, why.
type Result struct {
	Name   string `json:"name"`
	Rule   string `json:"rule"`
	Status Status `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Summary counts results by status.
type Summary struct {
	Pass int `json:"pass"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
}

// Report is the outcome of a run.
type Report struct {
	Protocol string   `json:"protocol"`
	Route    string   `json:"route"`
	Summary  Summary  `json:"summary"`
	Checks   []Result `json:"checks"`
}

func (r *Report) add(res Result) {
	r.Checks = append(r.Checks, res)
	switch res.Status {
	case Pass:
		r.Summary.Pass++
	case Fail:
		r.Summary.Fail++
	default:
		r.Summary.Skip++
	}
}

// Failed lists the rules of the failed checks.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.Rule)
		}
	}
	return out
}

// ExitCode is 0 when every check passed or was skipped, 1 when any failed.
func (r *Report) ExitCode() int {
	if r.Summary.Fail > 0 {
		return 1
	}
	return 0
}

// WriteText writes one line per check and a summary line.
func (r *Report) WriteText(w io.Writer) error {
	for _, c := range r.Checks {
		line := fmt.Sprintf("%-4s  %-34s  %s", map[Status]string{Pass: "PASS", Fail: "FAIL", Skip: "SKIP"}[c.Status], c.Name, c.Rule)
		if c.Detail != "" {
			line += " — " + c.Detail
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%s, route %s)\n",
		r.Summary.Pass, r.Summary.Fail, r.Summary.Skip, r.Protocol, r.Route)
	return err
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
