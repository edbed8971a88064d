package fakecore

import (
	"bytes"
	"context"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Consent is a business system's consent page, the double of what a
// client's agent_authorize_url serves (CORE_FACTS Addendum 4): it reads the
// authorization from Core with the Client Token, shows it, and approves or
// denies it there, then sends the browser to the redirect_uri Core
// answered. Mount it on its own server; ConsentOptions.CoreURL is where it
// calls Core.
type Consent struct {
	o        ConsentOptions
	decision atomic.Value // string: "", "approve" or "deny"
	client   *http.Client
}

// ConsentOptions configure a Consent page.
type ConsentOptions struct {
	CoreURL     string // Core's base URL
	ClientToken string // the client's Client Token (AuthClient.Token)
	// Principal and OnBehalfOf are the signed-in business user the page
	// approves for.
	Principal  corefacts.Principal
	OnBehalfOf string
	// Decision, when "approve" or "deny", decides on GET without showing
	// the page (a user who always clicks the same button; tests). "": the
	// page shows both buttons.
	Decision string
}

// NewConsent returns the page.
func NewConsent(o ConsentOptions) *Consent {
	p := &Consent{o: o, client: &http.Client{Timeout: 5 * time.Second}}
	p.decision.Store(o.Decision)
	return p
}

// SetDecision changes what a GET decides ("approve", "deny", or "" to show the page).
func (p *Consent) SetDecision(d string) { p.decision.Store(d) }

var consentPage = template.Must(template.New("consent").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Sign in an MCP host</title></head>
<body style="font-family:sans-serif;max-width:36em;margin:3em auto">
<h1>Allow {{.Device}} to use your knowledge?</h1>
<p>Signed in as <b>{{.User}}</b>. The application <b>{{.Client}}</b> asks to read the knowledge of
{{range $i, $r := .Routes}}{{if $i}}, {{end}}<code>{{$r}}</code>{{end}} on your behalf.</p>
<form method="post"><input type="hidden" name="authorization_id" value="{{.ID}}">
<button name="decision" value="approve">Approve</button>
<button name="decision" value="deny">Deny</button></form>
</body></html>
`))

func (p *Consent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet:
		id := r.URL.Query().Get("authorization_id")
		if d, _ := p.decision.Load().(string); d != "" {
			p.decide(w, r, id, d)
			return
		}
		var info struct {
			ClientAppID     string   `json:"client_app_id"`
			DeviceLabel     string   `json:"device_label"`
			RequestedRoutes []string `json:"requested_routes"`
			Status          string   `json:"status"`
		}
		status, body := p.call(r.Context(), http.MethodGet, id, "", nil)
		if status != http.StatusOK || json.Unmarshal(body, &info) != nil || info.Status != "pending" {
			http.Error(w, "This sign-in request is unknown, expired or already answered.", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = consentPage.Execute(w, map[string]any{"ID": id, "Device": info.DeviceLabel, "Client": info.ClientAppID,
			"Routes": info.RequestedRoutes, "User": p.o.Principal.ID})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if r.ParseForm() != nil {
			http.Error(w, "Bad form.", http.StatusBadRequest)
			return
		}
		d := r.PostForm.Get("decision")
		if d != "approve" && d != "deny" {
			http.Error(w, "Choose approve or deny.", http.StatusBadRequest)
			return
		}
		p.decide(w, r, r.PostForm.Get("authorization_id"), d)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "Method not allowed.", http.StatusMethodNotAllowed)
	}
}

// decide approves (for all requested routes) or denies at Core and sends
// the browser to Core's redirect_uri.
func (p *Consent) decide(w http.ResponseWriter, r *http.Request, id, d string) {
	var payload []byte
	if d == "deny" {
		payload = []byte(`{}`)
	} else {
		status, body := p.call(r.Context(), http.MethodGet, id, "", nil)
		var info struct {
			RequestedRoutes []string `json:"requested_routes"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &info) != nil {
			http.Error(w, "This sign-in request is unknown.", http.StatusBadRequest)
			return
		}
		pr := p.o.Principal
		roles := pr.Roles
		if roles == nil {
			roles = []string{}
		}
		payload, _ = json.Marshal(map[string]any{
			"principal":      principalJSON{ID: pr.ID, Tenant: pr.Tenant, Roles: roles, Audience: pr.Audience, Channel: pr.Channel},
			"on_behalf_of":   p.o.OnBehalfOf,
			"allowed_routes": info.RequestedRoutes,
		})
	}
	status, body := p.call(r.Context(), http.MethodPost, id, "/"+d, payload)
	var out struct {
		RedirectURI string `json:"redirect_uri"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &out) != nil || out.RedirectURI == "" {
		http.Error(w, "This sign-in request could not be answered.", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, out.RedirectURI, http.StatusSeeOther)
}

func (p *Consent) call(ctx context.Context, method, id, action string, payload []byte) (int, []byte) {
	if id == "" || strings.ContainsAny(id, "/?#%") {
		return 0, nil
	}
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method,
		strings.TrimSuffix(p.o.CoreURL, "/")+"/agent-auth/v1/authorizations/"+url.PathEscape(id)+action, rd)
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+p.o.ClientToken)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := p.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, b
}
