// Signs in to the sidecar's remote MCP endpoint the way an MCP host does,
// with the official MCP TypeScript SDK's OAuth client: given only the URL,
// StreamableHTTPClientTransport with an authProvider meets the 401 and runs
// its own discovery (RFC 9728 → RFC 8414), dynamic registration (RFC 7591),
// PKCE, the code exchange and, later, the refresh. The "browser" is a fetch
// that follows redirects to the business consent page and on to a loopback
// callback server. It prints one JSON summary on stdout (last line) for
// cmd/knowledge-sidecar/mcp_oauth_clients_test.go to check; it decides
// nothing.
//
// Input: one JSON argument {url, mode, query}; mode "signin" (approve,
// tools, expiry + refresh, revoke) or "deny". In "signin" mode it prints the
// line EXPIRE and waits for a line on stdin before each step that needs the
// access token expired (the test expires it at Core).
import http from "node:http";
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { out, step } from "./steps.mjs";

const { url, mode, query } = JSON.parse(process.argv[2]);

// The loopback callback: what the browser lands on.
let landed;
const server = http.createServer((req, res) => {
  landed = new URL(req.url, `http://${req.headers.host}`);
  res.end("You may close this window.");
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const port = server.address().port;

// An in-memory OAuthClientProvider, as a CLI host keeps one. It asks for a
// localhost callback (the sidecar gives Core 127.0.0.1) and sends no state.
class Provider {
  constructor() {
    this.saved = {};
    this.tokenHistory = [];
    this.redirects = 0;
  }
  get redirectUrl() { return `http://localhost:${port}/callback`; }
  get clientMetadata() {
    return {
      client_name: "ks-oauth-test", redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"], response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(c) { this.saved.client = c; }
  tokens() { return this.saved.tokens; }
  saveTokens(t) { this.saved.tokens = t; this.tokenHistory.push(t); }
  redirectToAuthorization(u) { this.authUrl = u; this.redirects++; }
  saveCodeVerifier(v) { this.saved.verifier = v; }
  codeVerifier() { return this.saved.verifier; }
  // What the SDK calls when the server refuses a grant (a revoked refresh
  // token: invalid_grant) before it starts a new sign-in.
  invalidateCredentials(scope) {
    if (scope === "all" || scope === "tokens") delete this.saved.tokens;
    if (scope === "all" || scope === "client") delete this.saved.client;
    if (scope === "all" || scope === "verifier") delete this.saved.verifier;
  }
}

// browse follows the authorization URL as a browser would and returns the
// callback it landed on.
async function browse(authUrl) {
  landed = undefined;
  const res = await fetch(authUrl, { redirect: "follow" });
  await res.text();
  if (!landed) throw new Error(`the browser ended at ${res.status}, not at the callback`);
  return landed;
}

const newTransport = (p) => new StreamableHTTPClientTransport(new URL(url), { authProvider: p });

// signIn connects with only the URL; on the SDK's UnauthorizedError it
// "opens the browser", hands the code to finishAuth and connects again.
async function signIn(p) {
  const first = new Client({ name: "ks-oauth-test", version: "1.0.0" });
  const t = newTransport(p);
  try {
    await first.connect(t);
    return first;
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  const auth = new URL(p.authUrl);
  out.authorize = { origin: auth.origin, path: auth.pathname, hasState: auth.searchParams.has("state"),
    resource: auth.searchParams.get("resource"), redirectUri: auth.searchParams.get("redirect_uri"),
    clientId: auth.searchParams.get("client_id") };
  const cb = await browse(p.authUrl);
  out.callback = { host: cb.host, hasCode: cb.searchParams.has("code"), error: cb.searchParams.get("error"),
    stateLength: (cb.searchParams.get("state") ?? "").length };
  const code = cb.searchParams.get("code");
  if (!code) return null;
  await t.finishAuth(code);
  const client = new Client({ name: "ks-oauth-test", version: "1.0.0" });
  await client.connect(newTransport(p));
  return client;
}

const summarize = (r) => ({ isError: r.isError === true, text: r.content?.[0]?.text ?? null });

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function expire() {
  process.stdout.write("EXPIRE\n");
  await lines.next();
}

const p = new Provider();
let client;
await step("signin", async () => {
  client = await signIn(p);
  out.signedIn = client !== null;
  out.clientId = p.saved.client?.client_id ?? null;
});

if (mode === "signin" && client) {
  await step("tools", async () => {
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    out.search = summarize(await client.callTool({ name: "knowledge_search", arguments: { query } }));
  });
  // The access token expires; the next call is refused, the SDK refreshes
  // by itself and retries — no browser, same client.
  await expire();
  await step("refresh", async () => {
    out.afterExpiry = summarize(await client.callTool({ name: "knowledge_search", arguments: { query } }));
    out.tokens = p.tokenHistory.length;
    out.rotated = p.tokenHistory.length >= 2 &&
      p.tokenHistory.at(-1).refresh_token !== p.tokenHistory.at(-2).refresh_token &&
      p.tokenHistory.at(-1).access_token !== p.tokenHistory.at(-2).access_token;
    out.redirectsAfterSignIn = p.redirects;
  });
  // Revocation (RFC 7009) at the endpoint the metadata names.
  await step("revoke", async () => {
    const origin = new URL(url).origin;
    const meta = await (await fetch(`${origin}/.well-known/oauth-authorization-server`)).json();
    const res = await fetch(meta.revocation_endpoint, {
      method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: p.tokens().refresh_token, token_type_hint: "refresh_token",
        client_id: p.saved.client.client_id }),
    });
    out.revokeStatus = res.status;
  });
  await expire();
  await step("afterRevoke", async () => {
    const before = p.redirects;
    try {
      await client.callTool({ name: "knowledge_search", arguments: { query } });
      out.afterRevoke = "answered";
    } catch (e) {
      out.afterRevoke = e instanceof UnauthorizedError ? "unauthorized" : `${e.name}: ${e.message}`;
    }
    out.newSignInAsked = p.redirects > before; // the host must send the user to sign in again
  });
}

await client?.close().catch(() => {});
server.close();
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
