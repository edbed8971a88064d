package proxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

type problemsErr []string

func (p problemsErr) Error() string  { return "invalid configuration: " + strings.Join(p, "; ") }
func (p problemsErr) List() []string { return p }

func TestAdminReload(t *testing.T) {
	cases := []struct {
		name     string
		reloader Reloader // nil: not enabled
		method   string
		code     int
		body     string
	}{
		{"not enabled", nil, "POST", 404, `{"status":"reload is not enabled"}`},
		{"applied", func() error { return nil }, "POST", 200, `{"status":"reloaded"}`},
		{"invalid configuration", func() error { return problemsErr{"rollout: bad", "core.url: is required"} }, "POST", 400,
			`{"status":"rejected","problems":["rollout: bad","core.url: is required"]}`},
		{"other failure", func() error { return errors.New("disk on fire at /etc/secret") }, "POST", 500, `{"status":"failed"}`},
		{"GET is not a reload", func() error { t.Error("reloaded on GET"); return nil }, "GET", 405, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, _ := url.Parse("http://core.invalid")
			s, err := New(Options{CoreURL: u})
			if err != nil {
				t.Fatal(err)
			}
			if tc.reloader != nil {
				s.SetReloader(tc.reloader)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, "/-/reload", nil)
			req.Host = "127.0.0.1:9090" // the admin listener serves IP literals (and configured names)
			s.AdminHandler().ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("status: got %d; want %d", rec.Code, tc.code)
			}
			if tc.body != "" && strings.TrimSpace(rec.Body.String()) != tc.body {
				t.Errorf("body: got %s; want %s", rec.Body.String(), tc.body)
			}
		})
	}
}

// TestReloadNotOnProxyListener: the proxy listener passes /-/reload to Core.
func TestReloadNotOnProxyListener(t *testing.T) {
	var got string
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.Path
		w.WriteHeader(404)
	}))
	defer core.Close()
	u, _ := url.Parse(core.URL)
	s, err := New(Options{CoreURL: u})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReloader(func() error { t.Error("the proxy listener reloaded"); return nil })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/-/reload", nil))
	if rec.Code != 404 || got != "POST /-/reload" {
		t.Errorf("got %d, Core saw %q; want Core's 404 for POST /-/reload", rec.Code, got)
	}
}
