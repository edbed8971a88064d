// The one JSON summary client.mjs and oauth.mjs print, and the steps that
// fill it. Each step's failure (an exception: a refused connection, a
// JSON-RPC error, a structuredContent the SDK found invalid) is recorded
// under its name in out.errors, and the steps after it still run.
export const out = { errors: {} };

export async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    out.errors[name] = `${e.name}: ${e.message}`;
  }
}
