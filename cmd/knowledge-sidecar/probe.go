package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// probeAgentTokenEnv optionally holds an Agent access token (bha_…) with
// which check-config --probe asks Core whether it has system-info. It is
// read only by the probe and never printed.
const probeAgentTokenEnv = "KNOWLEDGE_SIDECAR_PROBE_AGENT_TOKEN"

// Verdicts of one probe line.
const (
	verdictOK   = "ok"
	verdictFail = "FAIL"
	verdictWarn = "warn"
	verdictSkip = "skip"
)

// probeLine is one dependency's verdict. The detail never holds a secret or
// SQL: it is built from our own words, errors whose messages are documented
// to exclude them, and the addresses, database and user names of the
// operator's own configuration (Core's URL, the DSN's address), never a
// password or token.
type probeLine struct {
	name, verdict, detail string
}

// prober runs the probes of check-config --probe against live dependencies.
type prober struct {
	cfg     config.Config
	timeout time.Duration
	lines   []probeLine
}

func (p *prober) add(name, verdict, format string, args ...any) {
	p.lines = append(p.lines, probeLine{name, verdict, fmt.Sprintf(format, args...)})
}

// runProbes prints one line per dependency and a summary; exit 0 only when
// no probe failed (skipped ones — not configured — do not fail).
func runProbes(ctx context.Context, cfg config.Config, timeout time.Duration, stdout io.Writer) int {
	p := &prober{cfg: cfg, timeout: timeout}
	p.core(ctx)
	if !slices.ContainsFunc(p.lines, func(l probeLine) bool { return l.name == "mcp-oauth" }) {
		p.add("mcp-oauth", verdictSkip, "Core is not reachable")
	}
	p.catalog(ctx)
	p.redis(ctx)
	p.signing()
	failed := 0
	for _, l := range p.lines {
		if l.verdict == verdictFail {
			failed++
		}
		fmt.Fprintf(stdout, "probe %-14s %-4s  %s\n", l.name, l.verdict, l.detail)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "probe: %d of %d checks failed\n", failed, len(p.lines))
		return 1
	}
	fmt.Fprintf(stdout, "probe: every check passed (%d lines)\n", len(p.lines))
	return 0
}

func (p *prober) core(ctx context.Context) {
	coreTLS, err := sidecar.CoreTLS(p.cfg) // validated
	if err != nil {
		p.add("core", verdictFail, "%v", err)
		return
	}
	client, err := coreclient.NewClient(coreclient.Options{
		BaseURL: p.cfg.Core.URL, ServiceToken: p.cfg.Core.Token, Timeout: p.timeout, ProbeInterval: time.Second,
		Transport: sidecar.CoreClientTransport(p.cfg, coreTLS),
	})
	if err != nil {
		p.add("core", verdictFail, "%v", err)
		return
	}
	at := coreAddress(p.cfg.Core.URL)
	if err := client.ProbeCore(ctx); err != nil {
		p.add("core", verdictFail, "%s (tried %s)", coreProblem(err), at)
		why := "Core is not reachable"
		if errors.Is(err, coreclient.ErrNotACore) {
			why = "Core did not answer like a Core"
		}
		p.add("core-token", verdictSkip, "%s", why)
		p.add("system-info", verdictSkip, "%s", why)
		return
	}
	p.add("core", verdictOK, "reachable at %s; answers like a BailingHub Core (401 unauthorized on /agent-auth/v1/session without a token)", at)
	p.mcpOAuth(ctx, client)

	if p.cfg.Core.Token != "" {
		err = client.ProbeServiceToken(ctx)
	}
	switch {
	case p.cfg.Core.Token == "":
		p.add("core-token", verdictSkip, "no KNOWLEDGE_SIDECAR_CORE_TOKEN: knowledge features are off")
	case err == nil:
		p.add("core-token", verdictOK, "accepted by /kb/search")
	case errors.Is(err, coreclient.ErrTokenRateLimited):
		p.add("core-token", verdictWarn, "accepted by /kb/search, but Core's per-client rate limit is exhausted right now (429)")
	case errors.Is(err, coreclient.ErrTokenRefused):
		p.add("core-token", verdictFail, "refused by /kb/search: use a Client Token or the server token, not an Agent (bha_) or executor token")
	default:
		p.add("core-token", verdictFail, "%s", coreProblem(err))
	}

	agent := strings.TrimSpace(os.Getenv(probeAgentTokenEnv))
	if agent == "" {
		p.add("system-info", verdictSkip, "set %s to an Agent access token to check (without it the sidecar detects it at run time)", probeAgentTokenEnv)
		return
	}
	switch present, err := client.ProbeSystemInfo(ctx, "Bearer "+agent); {
	case err == nil && present:
		p.add("system-info", verdictOK, "present (Core ≥ 0.7): Core gates routes itself")
	case err == nil:
		p.add("system-info", verdictOK, "absent (Core < 0.7): the catalog gates routes (bz_clients grants needed)")
	case errors.Is(err, corefacts.ErrUnauthorized):
		p.add("system-info", verdictFail, "Core refused the Agent token of %s (expired? access tokens live 15 minutes)", probeAgentTokenEnv)
	default:
		p.add("system-info", verdictFail, "%s", coreProblem(err))
	}
}

// coreProblem words a Core probe error for an operator.
func coreProblem(err error) string {
	switch {
	case errors.Is(err, coreclient.ErrUnknownAuthority):
		return "Core's TLS certificate is not signed by a trusted CA: set core.ca_file to the PEM file of the CA that signs it"
	case errors.Is(err, coreclient.ErrCertificate):
		return "Core's TLS certificate does not verify (a host name it is not valid for, or expired)"
	case errors.Is(err, coreclient.ErrNotACore):
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the probe timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, coreclient.ErrNoSuchHost):
		return "the host name does not resolve"
	case errors.Is(err, corefacts.ErrUnavailable):
		return "unreachable or failing: " + strings.TrimPrefix(err.Error(), corefacts.ErrUnavailable.Error()+": ")
	}
	return err.Error()
}

// coreAddress is Core's URL as the probe tried it (core.url carries no
// credentials: Validate refuses them).
func coreAddress(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "core.url"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

func (p *prober) redis(ctx context.Context) {
	if p.cfg.LedgerBackend() != "redis" {
		p.add("redis", verdictSkip, "ledger backend is memory (one replica); set KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL for several")
		return
	}
	sharedredis.QuietLogs()
	c, err := sharedredis.New(sharedredis.Options{URL: p.cfg.Ledger.RedisURL, OpTimeout: p.timeout,
		Mode: p.cfg.Ledger.RedisMode, CAFile: p.cfg.Ledger.RedisCAFile})
	if err != nil {
		p.add("redis", verdictFail, "%v", err)
		return
	}
	r, err := ledger.NewRedis(c, ledger.RedisOptions{TTL: p.cfg.Ledger.TTL})
	if err != nil {
		c.Close()
		p.add("redis", verdictFail, "%v", err)
		return
	}
	defer r.Close()
	mode := "mode " + c.Mode()
	if err := r.Probe(ctx); err != nil {
		p.add("redis", verdictFail, "%s: %v", mode, err)
		return
	}
	top, err := c.Topology(ctx)
	if err != nil {
		p.add("redis", verdictFail, "%s: %v", mode, err)
		return
	}
	switch top.Mode {
	case sharedredis.ModeCluster:
		mode += fmt.Sprintf(", %d primaries (%s), %d replicas", len(top.Primaries), strings.Join(top.Primaries, ", "), top.Replicas)
	case sharedredis.ModeSentinel:
		mode += ", master " + cmp.Or(top.Master, "(none confirmed)")
	}
	p.add("redis", verdictOK, "%s; reachable; the ledger's Lua scripts load (rate limit: %s)", mode, p.cfg.RateLimitBackend())
}

func (p *prober) signing() {
	if ok, _ := p.cfg.KnowledgeEnabled(); !ok && p.cfg.Signing.Keys == "" {
		p.add("signing-keys", verdictSkip, "knowledge features are off")
		return
	}
	keys, err := knowledge.NewKeyring(p.cfg.Signing.Keys, p.cfg.Core.Token)
	switch {
	case err != nil:
		p.add("signing-keys", verdictFail, "%v", err)
	case p.cfg.Signing.Keys != "":
		p.add("signing-keys", verdictOK, "%d key(s), each at least 32 bytes; %q signs", len(keys.KeyIDs()), keys.SigningKeyID())
	case len(p.cfg.Core.Token) < 32:
		p.add("signing-keys", verdictFail, "derived from the Core token, which is shorter than 32 bytes: set KNOWLEDGE_SIDECAR_SIGNING_KEYS (knowledge-sidecar keygen)")
	default:
		p.add("signing-keys", verdictOK, "derived from the Core token (%d bytes); rotating the token invalidates references", len(p.cfg.Core.Token))
	}
}

// mcpOAuth asks Core whether the client MCP hosts sign in as can start a
// sign-in (SPEC §12): one authorization for the rolled-out routes, with a
// loopback callback nobody listens on. It is left unused and expires at
// Core after 10 minutes; no user sees it.
func (p *prober) mcpOAuth(ctx context.Context, client *coreclient.Client) {
	id := p.cfg.MCP.OAuth.ClientAppID
	if id == "" {
		p.add("mcp-oauth", verdictSkip, "mcp.oauth.client_app_id not set: MCP hosts bring a token (or sign in elsewhere)")
		return
	}
	pol, _ := rollout.Parse(p.cfg.Rollout) // validated
	routes := pol.Routes()
	if pol.Mode() != rollout.ModeAllow || len(routes) == 0 || len(routes) > 64 {
		p.add("mcp-oauth", verdictSkip, "the rollout lists no routes to ask for (%s): Core checks client %q at the first sign-in", pol.String(), id)
		return
	}
	state := make([]byte, 16)
	_, _ = rand.Read(state)
	sum := sha256.Sum256(state)
	payload, _ := json.Marshal(map[string]any{
		"client_app_id": id, "redirect_uri": "http://127.0.0.1:9/knowledge-sidecar-probe",
		"state": hex.EncodeToString(state), "requested_routes": routes, "device_label": p.cfg.MCP.OAuth.DeviceLabel,
		"code_challenge": base64.RawURLEncoding.EncodeToString(sum[:]), "code_challenge_method": "S256",
	})
	status, body, err := client.CreateAuthorization(ctx, payload, netip.Addr{})
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	switch {
	case err != nil:
		p.add("mcp-oauth", verdictFail, "%s", coreProblem(err))
	case status == http.StatusCreated:
		p.add("mcp-oauth", verdictOK, "client %q can sign hosts in for %s (Core created an authorization; unused, it expires in 10 minutes)",
			id, strings.Join(routes, ", "))
	case status == http.StatusTooManyRequests:
		p.add("mcp-oauth", verdictWarn, "Core's sign-in rate limit (10 a minute per client and address) is reached right now; try again in a minute")
	case e.Error == "invalid_client":
		p.add("mcp-oauth", verdictFail, "Core refuses client %q: unknown or disabled, no agent_authorize_url (the business consent page), "+
			"or a rolled-out route (%s) outside its allowed_routes", id, strings.Join(routes, ", "))
	default:
		p.add("mcp-oauth", verdictFail, "Core answered %d %q to a sign-in of client %q (mcp.oauth.device_label 1–128 characters?)", status, e.Error, id)
	}
}
