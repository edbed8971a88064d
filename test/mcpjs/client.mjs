// Drives the sidecar's remote MCP endpoint with the official MCP TypeScript
// SDK's Streamable HTTP client, as a host would, and prints one JSON summary
// on stdout for cmd/knowledge-sidecar/mcp_remote_clients_test.go to check. It
// decides nothing: it records what the server answered.
//
// Input: one JSON argument {url, token, query, near}. url is the endpoint
// (…/knowledge/mcp); query finds the seeded document; near is a passage of it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { out, step } from "./steps.mjs";

const { url, token, query, near } = JSON.parse(process.argv[2]);
const auth = { Authorization: `Bearer ${token}` };

async function connect(endpoint) {
  const client = new Client({ name: "ks-mcpjs-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers: auth } });
  await client.connect(transport);
  return client;
}

// The parts of a tool result the test looks at.
const summarize = (r) => ({
  isError: r.isError === true,
  text: r.content?.[0]?.type === "text" ? r.content[0].text : null,
  contentTypes: (r.content ?? []).map((c) => c.type),
  structured: r.structuredContent ?? null,
});

let client, ref;
await step("connect", async () => {
  client = await connect(url);
  out.protocolVersion = client.transport.protocolVersion ?? null;
  out.sessionId = client.transport.sessionId ?? null;
  out.server = client.getServerVersion();
});

// tools/list: the SDK caches each outputSchema here and validates every
// later structuredContent against it (a mismatch throws).
await step("tools/list", async () => {
  out.tools = (await client.listTools()).tools.map((t) => ({
    name: t.name, title: t.title ?? null, description: t.description, annotations: t.annotations ?? null,
    inputSchema: t.inputSchema, hasOutputSchema: t.outputSchema?.type === "object",
  }));
});

await step("knowledge_search", async () => {
  const search = await client.callTool({ name: "knowledge_search", arguments: { query } });
  out.search = summarize(search);
  ref = search.structuredContent?.hints?.[0]?.ref;
});

// Read the first hint's chain to its end, following each next_cursor.
await step("knowledge_read chain", async () => {
  out.pages = [];
  for (let cursor = undefined; out.pages.length < 50; ) {
    const r = summarize(await client.callTool({ name: "knowledge_read", arguments: cursor ? { ref, cursor } : { ref } }));
    out.pages.push(r);
    cursor = r.structured?.next_cursor;
    if (r.isError || !cursor) break;
  }
});

await step("knowledge_read near", async () => {
  out.near = summarize(await client.callTool({ name: "knowledge_read", arguments: { ref, near } }));
});

// One character changed in the middle of the ref: its MAC no longer holds.
await step("knowledge_read tampered", async () => {
  const i = Math.floor(ref.length / 2);
  const tampered = ref.slice(0, i) + (ref[i] === "A" ? "B" : "A") + ref.slice(i + 1);
  out.tampered = summarize(await client.callTool({ name: "knowledge_read", arguments: { ref: tampered } }));
});
await client?.close();

// Without a token and with a refused one: the SDK's own error, then the raw
// answer (status, WWW-Authenticate) and the metadata document it names.
const initialize = JSON.stringify({
  jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
});
out.unauthorized = {};
for (const [name, headers] of [["none", {}], ["bad", { Authorization: "Bearer not-a-valid-token" }]]) {
  await step(`unauthorized ${name}`, async () => {
    let sdkError = null;
    try {
      const c = new Client({ name: "ks-mcpjs-test", version: "1.0.0" });
      await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
      await c.close();
    } catch (e) {
      sdkError = `${e.name}: ${e.message}`;
    }
    const res = await fetch(url, {
      method: "POST", body: initialize,
      headers: { ...headers, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    });
    out.unauthorized[name] = { sdkError, status: res.status, wwwAuthenticate: res.headers.get("www-authenticate") };
  });
}
await step("metadata", async () => {
  const m = /resource_metadata="([^"]+)"/.exec(out.unauthorized.none?.wwwAuthenticate ?? "");
  if (!m) throw new Error("no resource_metadata in the 401's WWW-Authenticate");
  const res = await fetch(m[1]);
  out.metadata = { status: res.status, contentType: res.headers.get("content-type"), body: await res.json() };
});

// The search/fetch profile for OpenAI connectors.
await step("openai profile", async () => {
  const openai = await connect(`${url}?profile=openai`);
  out.openai = { tools: (await openai.listTools()).tools.map((t) => t.name) };
  const found = summarize(await openai.callTool({ name: "search", arguments: { query } }));
  out.openai.search = found;
  const results = found.structured?.results ?? JSON.parse(found.text).results;
  out.openai.results = results;
  const fetched = summarize(await openai.callTool({ name: "fetch", arguments: { id: results[0].id } }));
  out.openai.fetch = { ...fetched, doc: fetched.structured ?? JSON.parse(fetched.text) };
  await openai.close();
});

process.stdout.write(JSON.stringify(out) + "\n");
