package testkit

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now: got %v; want %v", got, t0)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { c.Advance(time.Second); _ = c.Now() })
	}
	wg.Wait()
	if got, want := c.Now(), t0.Add(8*time.Second); !got.Equal(want) {
		t.Fatalf("after 8 concurrent Advance(1s): got %v; want %v", got, want)
	}
}

func TestRunningClock(t *testing.T) {
	c := NewRunningClock()
	before := time.Now()
	c.Advance(time.Hour)
	if got := c.Now(); got.Before(before.Add(time.Hour)) || got.After(time.Now().Add(time.Hour)) {
		t.Fatalf("running clock after Advance(1h): got %v; want real time + 1h (%v)", got, before.Add(time.Hour))
	}
	a := c.Now()
	if !Poll(5*time.Second, func() bool { return c.Now().After(a) }) {
		t.Fatal("running clock: did not move with real time")
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(5*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll: cond called %d times; want true on the 3rd", n)
	}
	if Poll(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll of a never-true condition: got true")
	}
}

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total"}, []string{"code"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	reg.MustRegister(c, h)
	c.WithLabelValues("200").Add(3)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"x_total", map[string]string{"code": "200"}, 3},
		{"x_total", map[string]string{"code": "500"}, 0},
		{"x_total", nil, 0}, // labels must match exactly
		{"x_seconds", nil, 2},
		{"absent", nil, 0},
	} {
		if got := Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v: got %v; want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

func TestMetricSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "q_total"}, []string{"query", "outcome"})
	reg.MustRegister(c)
	c.WithLabelValues("route", "ok").Add(3)
	c.WithLabelValues("route", "error").Add(1)
	c.WithLabelValues("doc", "ok").Add(5)
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"q_total", nil, 9},
		{"q_total", map[string]string{"query": "route"}, 4},
		{"q_total", map[string]string{"query": "route", "outcome": "ok"}, 3},
		{"q_total", map[string]string{"query": "none"}, 0},
		{"absent", nil, 0},
	} {
		if got := MetricSum(t, reg, tc.name, tc.match); got != tc.want {
			t.Errorf("%s%v: got %v; want %v", tc.name, tc.match, got, tc.want)
		}
	}
}

func TestDocument(t *testing.T) {
	title, a := Document(3, 4096)
	_, b := Document(3, 4096)
	_, other := Document(4, 4096)
	if a != b || a == other {
		t.Fatal("Document: want the same text for the same number, another for another")
	}
	if title != "Bench document 03" || !strings.HasPrefix(a, "# "+title+"\n\n") {
		t.Fatalf("Document: title %q, start %q", title, a[:30])
	}
	if len(a) < 4096 || len(a) > 4096+64 || !utf8.ValidString(a) || !strings.Contains(a, "## Section 1") {
		t.Fatalf("Document: %d bytes, valid UTF-8 %v; want about 4096 with sections", len(a), utf8.ValidString(a))
	}
}

func TestSkipLine(t *testing.T) {
	skips.mu.Lock()
	saved := skips.n
	skips.n = map[string]int{"Redis at KS_TEST_REDIS_URL": 2, "MariaDB at KS_TEST_MYSQL_DSN": 1}
	skips.mu.Unlock()
	defer func() { skips.mu.Lock(); skips.n = saved; skips.mu.Unlock() }()
	line := skipLine()
	for _, want := range []string{"3 tests SKIPPED", "MariaDB at KS_TEST_MYSQL_DSN, Redis at KS_TEST_REDIS_URL", "Run ./scripts/test.sh", "./internal/testkit: "} {
		if !strings.Contains(line, want) {
			t.Errorf("skip line %q; want it to contain %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("skip line %q: want one line", line)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { b.Write([]byte("line\n")) })
	}
	wg.Wait()
	if got := b.Lines(); len(got) != 4 {
		t.Fatalf("Lines: got %q; want 4 lines", got)
	}
	if got := b.Take(); got != strings.Repeat("line\n", 4) {
		t.Fatalf("Take: got %q", got)
	}
	if got := b.String(); got != "" {
		t.Fatalf("after Take: got %q; want nothing", got)
	}
}
