package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// tlsCore is a fake Core behind TLS with a private CA (httptest's
// self-signed certificate), the PEM file of that CA, and an Agent token.
type tlsCore struct {
	url, caFile, token, service string
	addr                        string // host:port, which no answer may name
}

func newTLSCore(t *testing.T) tlsCore {
	t.Helper()
	c := tlsCore{service: "svc_tls-core-service-token-0123456789", token: fakecore.Token("tls-core")}
	core := fakecore.New(fakecore.Options{ServiceToken: c.service, SystemInfo: true})
	core.AddKB(demoKB)
	core.SetRoute(demoRoute, fakecore.GateAllowed)
	core.AddSession(c.token, corefacts.Session{
		SessionID: "6f1c2f7e-5a53-4d52-9a0e-3f3b5f0c9d11", ClientAppID: demoClient,
		Principal: corefacts.Principal{ID: "u1"}, AllowedRoutes: []string{demoRoute},
		ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	srv := httptest.NewUnstartedServer(core)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused without the CA
	srv.StartTLS()
	t.Cleanup(func() { srv.Close(); core.Close() })
	c.url, c.addr = srv.URL, srv.Listener.Addr().String()
	c.caFile = filepath.Join(t.TempDir(), "core-ca.pem")
	if err := os.WriteFile(c.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCoreCAFile: with core.ca_file the sidecar passes traffic through to
// an https Core behind a private CA and calls it itself (identity for
// capabilities); without it both fail with answers that name no address,
// and check-config --probe says to set core.ca_file.
func TestCoreCAFile(t *testing.T) {
	c := newTLSCore(t)
	for _, tc := range []struct {
		name       string
		caFile     string
		passCode   int // a pass-through request Core answers 404
		capsCode   int
		probeWants string
	}{
		{"with the CA file", c.caFile, http.StatusNotFound, http.StatusOK, "probe core           ok"},
		{"without it", "", http.StatusBadGateway, http.StatusServiceUnavailable, "not signed by a trusted CA: set core.ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Core.URL, cfg.Core.CAFile, cfg.Core.Token = c.url, tc.caFile, c.service
			cfg.Rollout, cfg.NativeDetection = "all", native.ModeNever
			cat := catalog.NewMemCatalog()
			cat.PutKB(demoKB, true)
			cat.PutRoute(demoRoute, true, demoKnowledge)
			cat.PutClient(demoClient, true, []string{demoRoute}, "http://127.0.0.1:8765/callback")
			app, err := sidecar.Build(context.Background(), cfg, sidecar.Deps{Catalog: cat, SingleProcess: true})
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			do := func(path, auth string) (int, string) {
				req := httptest.NewRequest("GET", path, nil)
				if auth != "" {
					req.Header.Set("Authorization", "Bearer "+auth)
				}
				rec := httptest.NewRecorder()
				app.Server.Handler().ServeHTTP(rec, req)
				return rec.Code, rec.Body.String()
			}
			for _, r := range []struct {
				path, auth string
				want       int
			}{
				{"/no/such/core/path", "", tc.passCode},
				{"/agent-api/v1/workspaces/" + demoRoute + "/knowledge/capabilities", c.token, tc.capsCode},
			} {
				code, body := do(r.path, r.auth)
				if code != r.want {
					t.Errorf("GET %s: got %d %s; want %d", r.path, code, body, r.want)
				}
				host, _, _ := strings.Cut(c.addr, ":")
				if strings.Contains(body, c.addr) || strings.Contains(body, host) {
					t.Errorf("GET %s: the answer names Core's address: %s", r.path, body)
				}
			}
			var out bytes.Buffer
			runProbes(context.Background(), cfg, 5*time.Second, &out)
			if !strings.Contains(out.String(), tc.probeWants) {
				t.Errorf("check-config --probe lacks %q:\n%s", tc.probeWants, out.String())
			}
		})
	}
}

// TestCoreCAFileChecked: check-config refuses a CA file that does not exist,
// holds no certificate or something else than certificates, and a CA file
// for an http:// Core.
func TestCoreCAFileChecked(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	notPEM := write("notpem.pem", "just text\n")
	key := write("key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})))
	badCert := write("bad.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}})))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct{ name, url, ca, want string }{
		{"missing", "https://core.internal", missing, `core.ca_file: "` + missing + `": does not exist`},
		{"not PEM", "https://core.internal", notPEM, `core.ca_file: "` + notPEM + `": holds no PEM certificate`},
		{"a key", "https://core.internal", key, `core.ca_file: "` + key + `": holds a PEM "PRIVATE KEY" block; want only CERTIFICATE blocks`},
		{"bad certificate", "https://core.internal", badCert, `core.ca_file: "` + badCert + `": certificate 1 does not parse`},
		{"http Core", "http://core.internal", newTLSCore(t).caFile, "core.ca_file: is set but core.url is not https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(envOf(t, "core.url"), tc.url)
			t.Setenv(envOf(t, "core.ca_file"), tc.ca)
			code, _, stderr := runCLI("check-config")
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("got exit %d\n%s\nwant 1 and %q", code, stderr, tc.want)
			}
		})
	}
}
