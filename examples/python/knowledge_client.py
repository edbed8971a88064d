#!/usr/bin/env python3
"""A minimal host-side client of bailing.agent-knowledge.v1, standard library only.

It negotiates (capabilities: the v1 schema with supported: true), searches,
reads the first hint page by page and, with --turn, starts an on_demand turn,
assembles its knowledge by the echoed mode and status (assemble_turn) and
reads its first same-run hint with the turn's run_id. What it caches is kept
per (turn, account, authorization, route, capabilities declaration) and
dropped when any changes — the declaration changes when the Core behind the
route is upgraded to serve the protocol natively, or rolled back; a late
answer for an old turn is ignored (KnowledgeCache). The tool-calling model is
left out: this is what a host's tool handlers send. Usage:

  python3 examples/python/knowledge_client.py --url http://127.0.0.1:8080 --route demo \
      --token-file ~/.config/bailinghub/agent-token [--turn] "Can I get a refund?"

The token may also come from BAILING_AGENT_TOKEN. Exit 0 on success, 1 when
the workspace does not support the protocol or a call fails, 2 on usage errors.
"""

import argparse
import hashlib
import json
import os
import sys
import threading
import urllib.error
import urllib.request
import uuid

READ_MAX_BYTES = 16384  # one page; the chain of one ref ends after 128 KiB
CAPABILITIES_V1 = "bailing.agent-knowledge-capabilities.v1"


def capabilities_verdict(caps):
    """What a 200 capabilities answer says: "enabled", "not_enabled" or
    "unsupported". Only the v1 schema with supported: true is the protocol;
    supported: false (or missing) is unsupported, like a 404: keep Core's
    inline knowledge."""
    if not isinstance(caps, dict) or caps.get("schema_version") != CAPABILITIES_V1 or caps.get("supported") is not True:
        return "unsupported"
    return "enabled" if caps.get("enabled") is True else "not_enabled"


def assemble_turn(turn):
    """Decides what knowledge a turn answer gives the model, by the delivery
    block's echoed mode and status, never by empty arrays.

    Returns (source, items, note): source "inline" (items: the turn's own
    context.knowledge) or "hints" (items: same-run hints to read on demand);
    note is None, or a sentence for the model when the knowledge is
    incomplete or could not be consulted. partial, unavailable and disabled
    never mean "there is no knowledge"."""
    context = turn.get("context") or {}
    inline = context.get("knowledge") or []
    block = turn.get("knowledge_delivery")
    if not isinstance(block, dict):
        # No block: this Core does not speak the protocol (or the turn was
        # not intercepted); the turn carries Core's inline knowledge.
        return "inline", inline, None
    mode, status = block.get("mode"), block.get("status")
    notes = {
        "partial": "The workspace knowledge was only partly reachable: other relevant material may exist.",
        "unavailable": "The workspace knowledge could not be consulted now: this is not evidence that it holds nothing relevant.",
        "disabled": "Knowledge is not configured for this workspace: this says nothing about the question.",
    }
    if mode == "inline":
        return "inline", inline, notes.get(status)
    if mode == "on_demand":
        hints = block.get("hints") or []
        if status == "ok":
            return "hints", hints, None
        if status in notes:
            return "hints", hints, notes[status]
        raise ValueError(f"unknown knowledge_delivery status {status!r}")
    raise ValueError(f"unknown knowledge_delivery mode {mode!r}")


def authorization_digest(token):
    """What the cache keeps of a bearer token: a change of token (a refresh)
    is a change of authorization, and the token is not stored beside it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


# The capabilities fields that declare what the host may rely on; a change in
# any of them (a Core upgraded to a native version, a rollback, another
# knowledge configuration) invalidates what was cached under the old one.
DECLARATION_FIELDS = ("schema_version", "protocol", "supported", "route", "enabled",
                      "knowledge_scope_revision", "delivery_modes", "limits")


def capabilities_digest(caps):
    """A digest of a capabilities answer's declaration (DECLARATION_FIELDS,
    canonical JSON): equal answers give equal digests whatever their key
    order or other fields; any change of a declared field changes it."""
    decl = {k: caps.get(k) for k in DECLARATION_FIELDS} if isinstance(caps, dict) else None
    canon = json.dumps(decl, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def cache_scope(turn, account, token, route, caps):
    """The cache scope: (turn, account, authorization, route, capabilities
    declaration) — the five triggers on which a host drops what it cached.
    Ask capabilities again on each trigger and build the scope from that
    answer, so a changed declaration drops the cache too."""
    return (turn, account, authorization_digest(token), route, capabilities_digest(caps))


class KnowledgeCache:
    """Hints and refs a host obtained, for one scope: (turn, account,
    authorization, route, capabilities declaration) — see cache_scope. Entering another scope drops everything; an
    answer for a scope that is no longer current (a late answer for an old
    turn) is ignored; only refs of the current scope's hints are read."""

    def __init__(self):
        self._lock = threading.Lock()
        self._scope = None
        self._hints = []

    def enter(self, scope):
        """Makes scope current; returns True when the cache was dropped."""
        with self._lock:
            if scope == self._scope:
                return False
            self._scope, self._hints = scope, []
            return True

    def store(self, scope, hints):
        """Keeps hints obtained by a request made in scope; False (nothing
        kept) when the scope changed meanwhile."""
        with self._lock:
            if scope != self._scope:
                return False
            self._hints.extend(hints)
            return True

    def hints(self, scope):
        with self._lock:
            return list(self._hints) if scope == self._scope else []

    def allows(self, scope, ref):
        return any(h.get("ref") == ref for h in self.hints(scope))


class ProtocolError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


def call(base, route, token, method, path, body=None):
    """One request to the workspace's Agent API; returns the decoded JSON."""
    url = f"{base.rstrip('/')}/agent-api/v1/workspaces/{route}/{path}"
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return json.load(res)
    except urllib.error.HTTPError as e:
        try:
            err = json.load(e)
        except ValueError:
            err = {}
        raise ProtocolError(e.code, err.get("error", f"http_{e.code}"), err.get("message", "")) from None


def read_all(base, route, token, ref, run_id=None):
    """Reads a hint's document page by page; returns (title, text, complete)."""
    parts, cursor, title = [], None, ""
    while True:
        body = {"ref": ref, "max_bytes": READ_MAX_BYTES}
        if cursor:
            body["cursor"] = cursor  # passed back verbatim
        if run_id:
            body["run_id"] = run_id
        page = call(base, route, token, "POST", "knowledge/read", body)
        title = page.get("title", title)
        parts.append(page.get("content", ""))
        cursor = page.get("next_cursor")
        if not cursor:
            # budget_exhausted: the 128 KiB chain budget ended the read, so
            # the material is incomplete; say so rather than guess the rest.
            return title, "".join(parts), not page.get("budget_exhausted", False)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the sidecar or a native Core, e.g. http://127.0.0.1:8080")
    ap.add_argument("--route", required=True, help="workspace (route) key")
    ap.add_argument("--token-file", help="file holding the Agent access token (default: $BAILING_AGENT_TOKEN)")
    ap.add_argument("--turn", action="store_true", help="also start an on_demand turn and read its first hint")
    ap.add_argument("question")
    args = ap.parse_args(argv)
    if args.token_file:
        with open(os.path.expanduser(args.token_file), encoding="utf-8") as f:
            token = f.read().strip()
    else:
        token = os.environ.get("BAILING_AGENT_TOKEN", "").strip()
    if not token:
        print("no Agent access token: give --token-file or set BAILING_AGENT_TOKEN", file=sys.stderr)
        return 2

    try:
        caps = call(args.url, args.route, token, "GET", "knowledge/capabilities")
    except ProtocolError as e:
        if e.status in (404, 405, 501):
            print("this workspace does not support bailing.agent-knowledge.v1: keep Core's inline knowledge", file=sys.stderr)
        else:
            print(f"capabilities failed: {e}", file=sys.stderr)  # 401/429/5xx are errors, not "unsupported"
        return 1
    verdict = capabilities_verdict(caps)
    if verdict == "unsupported":
        print("this workspace does not support bailing.agent-knowledge.v1 (supported is not true): keep Core's inline knowledge", file=sys.stderr)
        return 1
    if verdict == "not_enabled":
        print("knowledge is not enabled for this workspace", file=sys.stderr)
        return 1

    cache = KnowledgeCache()
    account = "cli"  # the signed-in account a real host acts for
    scope = cache_scope(None, account, token, args.route, caps)
    cache.enter(scope)

    try:
        found = call(args.url, args.route, token, "POST", "knowledge/search", {"query": args.question, "limit": 3})
        status, hints = found.get("status"), found.get("hints", [])
        print(f"search status: {status}")
        if status != "ok":
            print("the search was not complete: this is not evidence that there is no relevant information")
        cache.store(scope, hints)
        for i, h in enumerate(hints, 1):
            print(f"hint {i}: {h['title']}")
        if hints and cache.allows(scope, hints[0]["ref"]):
            title, text, complete = read_all(args.url, args.route, token, hints[0]["ref"])
            print(f"read: {title}: {len(text.encode('utf-8'))} bytes{'' if complete else ' (incomplete: read budget reached)'}")
            print(text[:300])
        if args.turn:
            ids = uuid.uuid4().hex
            turn = call(args.url, args.route, token, "POST", "turns", {
                "client_conversation_id": "py-" + ids[:12], "client_turn_id": "t-" + ids[:12],
                "user_message_id": "m-" + ids[:12], "user_input": args.question, "knowledge_delivery": "on_demand"})
            run_id = turn["run_id"]
            # A new turn: nothing cached for the search above is used in it.
            # The declaration is asked again: a Core upgraded (or rolled
            # back) meanwhile declares otherwise, which drops the cache too.
            caps = call(args.url, args.route, token, "GET", "knowledge/capabilities")
            scope = cache_scope(run_id, account, token, args.route, caps)
            cache.enter(scope)
            source, items, note = assemble_turn(turn)
            if source == "inline":
                print(f"turn run_id: {run_id}, {len(items)} inline knowledge item(s)")
            else:
                cache.store(scope, items)
                print(f"turn run_id: {run_id}, {len(items)} same-run hint(s)")
            if note:
                print(f"turn knowledge note: {note}")
            if source == "hints" and items and cache.allows(scope, items[0]["ref"]):
                title, text, _ = read_all(args.url, args.route, token, items[0]["ref"], run_id=run_id)
                print(f"turn hint 1: {title}: {len(text.encode('utf-8'))} bytes")
    except ProtocolError as e:
        print(f"knowledge call failed: {e}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        print(f"knowledge service unreachable: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
