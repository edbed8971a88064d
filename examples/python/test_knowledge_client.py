#!/usr/bin/env python3
"""Unit tests of knowledge_client.py's host rules (standard library only):
capabilities need supported: true, a turn is assembled by its echoed mode and
status, and cached hints belong to one (turn, account, authorization, route,
capabilities declaration).
Run: python3 examples/python/test_knowledge_client.py"""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import knowledge_client as kc  # noqa: E402

V1 = {"schema_version": "bailing.agent-knowledge-capabilities.v1", "protocol": "bailing.agent-knowledge.v1"}
INLINE = [{"title": "Refund policy", "content": "Refunds within 14 days."}]
HINTS = [{"ref": "kr1.a", "title": "Refund policy"}]


def turn(block):
    t = {"schema_version": "bailing.agent-turn-context.v1", "run_id": "r1", "context": {"knowledge": INLINE}}
    if block is not None:
        t["knowledge_delivery"] = block
    return t


class Capabilities(unittest.TestCase):
    def test_verdicts(self):
        cases = [
            ("supported and enabled", dict(V1, supported=True, enabled=True), "enabled"),
            ("supported, not enabled", dict(V1, supported=True, enabled=False), "not_enabled"),
            ("supported false", dict(V1, supported=False, enabled=True), "unsupported"),
            ("supported missing", dict(V1, enabled=True), "unsupported"),
            ("supported as a string", dict(V1, supported="true", enabled=True), "unsupported"),
            ("another schema", {"schema_version": "other", "supported": True, "enabled": True}, "unsupported"),
        ]
        for name, caps, want in cases:
            with self.subTest(name):
                got = kc.capabilities_verdict(caps)
                self.assertEqual(got, want, f"got {got}; want {want}")


class AssembleTurn(unittest.TestCase):
    def test_by_mode_and_status(self):
        cases = [
            ("no block: Core not speaking the protocol", None, "inline", INLINE, False),
            ("inline ok", {"mode": "inline", "status": "ok", "hints": []}, "inline", INLINE, False),
            ("inline unavailable", {"mode": "inline", "status": "unavailable", "hints": []}, "inline", INLINE, True),
            ("on_demand ok", {"mode": "on_demand", "status": "ok", "hints": HINTS}, "hints", HINTS, False),
            ("on_demand ok, no hint", {"mode": "on_demand", "status": "ok", "hints": []}, "hints", [], False),
            ("on_demand partial", {"mode": "on_demand", "status": "partial", "hints": HINTS}, "hints", HINTS, True),
            ("on_demand unavailable", {"mode": "on_demand", "status": "unavailable", "hints": []}, "hints", [], True),
            ("on_demand disabled", {"mode": "on_demand", "status": "disabled", "hints": []}, "hints", [], True),
        ]
        for name, block, source, items, noted in cases:
            with self.subTest(name):
                got_source, got_items, note = kc.assemble_turn(turn(block))
                self.assertEqual((got_source, got_items), (source, items), f"got {got_source} {got_items}; want {source} {items}")
                self.assertEqual(note is not None, noted, f"note {note!r}; want {'a note' if noted else 'none'}")
                if note:
                    self.assertNotIn("no relevant", note.lower())

    def test_unknown_mode_or_status_is_refused(self):
        for block in ({"mode": "hint", "status": "ok"}, {"mode": "on_demand", "status": "weird"}):
            with self.subTest(block):
                with self.assertRaises(ValueError):
                    kc.assemble_turn(turn(block))


CAPS = dict(V1, supported=True, route="orders", enabled=True, knowledge_scope_revision="a" * 64,
            delivery_modes=["inline", "on_demand"], limits={"read_max_bytes": 32768, "reference_ttl_seconds": 300})


class Declaration(unittest.TestCase):
    def test_digest(self):
        same = dict(reversed(list(CAPS.items())))  # another key order
        same["x_extra"] = "not declared"
        self.assertEqual(kc.capabilities_digest(same), kc.capabilities_digest(CAPS))
        changes = [
            ("scope revision (a native Core's own)", {"knowledge_scope_revision": "f" * 64}),
            ("enabled", {"enabled": False}),
            ("delivery modes", {"delivery_modes": ["inline"]}),
            ("limits", {"limits": {"read_max_bytes": 16384, "reference_ttl_seconds": 300}}),
            ("protocol", {"protocol": "bailing.agent-knowledge.v2"}),
        ]
        for name, change in changes:
            with self.subTest(name):
                self.assertNotEqual(kc.capabilities_digest(dict(CAPS, **change)), kc.capabilities_digest(CAPS))

    def test_changed_declaration_drops_cache(self):
        c = kc.KnowledgeCache()
        before = kc.cache_scope("run-1", "alice", "bha_1", "orders", CAPS)
        c.enter(before)
        self.assertTrue(c.store(before, HINTS))
        self.assertFalse(c.enter(kc.cache_scope("run-1", "alice", "bha_1", "orders", dict(CAPS))),
                         "the same declaration dropped the cache")
        upgraded = kc.cache_scope("run-1", "alice", "bha_1", "orders", dict(CAPS, knowledge_scope_revision="f" * 64))
        self.assertTrue(c.enter(upgraded), "a changed declaration kept the cache")
        self.assertFalse(c.allows(upgraded, "kr1.a"))


class Cache(unittest.TestCase):
    BASE = kc.cache_scope("run-1", "alice", "bha_1", "orders", CAPS)

    def test_scope_change_drops(self):
        cases = [
            ("same scope", self.BASE, False),
            ("turn", ("run-2",) + self.BASE[1:], True),
            ("account", self.BASE[:1] + ("bob",) + self.BASE[2:], True),
            ("authorization", self.BASE[:2] + (kc.authorization_digest("bha_2"),) + self.BASE[3:], True),
            ("route", self.BASE[:3] + ("billing",) + self.BASE[4:], True),
            ("capabilities declaration", self.BASE[:4] + (kc.capabilities_digest(dict(CAPS, enabled=False)),), True),
        ]
        for name, nxt, dropped in cases:
            with self.subTest(name):
                c = kc.KnowledgeCache()
                c.enter(self.BASE)
                self.assertTrue(c.store(self.BASE, HINTS))
                self.assertEqual(c.enter(nxt), dropped, f"enter: got dropped {not dropped}; want {dropped}")
                self.assertEqual(c.allows(nxt, "kr1.a"), not dropped)

    def test_late_answer_ignored(self):
        c = kc.KnowledgeCache()
        c.enter(self.BASE)
        asked = self.BASE  # a search of turn run-1 is in flight ...
        done = threading.Event()

        def user_moves_on():
            c.enter(("run-2",) + self.BASE[1:])
            done.set()

        threading.Thread(target=user_moves_on).start()
        done.wait()
        self.assertFalse(c.store(asked, HINTS), "late answer stored; want it ignored")
        now = ("run-2",) + self.BASE[1:]
        self.assertEqual(c.hints(now), [])
        self.assertFalse(c.allows(now, "kr1.a"))


if __name__ == "__main__":
    unittest.main(verbosity=1)
