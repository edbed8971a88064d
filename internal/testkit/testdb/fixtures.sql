-- knowledge-sidecar test fixtures. UTC literals only (Core stores UTC
-- wall-clock DATETIMEs and never NOW()). Every id here has a Go constant in
-- fixtures.go; keep the two in step (TestFixturesMatchConstants checks).

-- The migration rows of a pre-0.8 Core are internal/coredb/migrations.sql.

-- Routes: NULL knowledge, legacy kb_id only, kb_ids (with a disabled and a
-- missing KB), empty kb_ids (no fallback to kb_id), a disabled route, audience
-- policies, a case-variant route key and KB id, and non-numeric settings.
INSERT INTO bz_routes (route_key, enabled, knowledge, audience, tools, agent_client, updated_at) VALUES
  ('kb-null',   1, NULL, NULL, NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-legacy', 1, '{"kb_id":" faq "}', NULL, NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-multi',  1, '{"kb_ids":["faq","manuals","kb-disabled","kb-missing"],"kb_id":"ignored","top_k":8,"min_score":0.5,"inject":"doc","max_docs":2,"page_boost":true,"extra":"kept"}',
                   NULL, '{"agent_direct":{"enabled":false}}', '{"enabled":false}', '2026-01-02 08:30:00'),
  ('kb-empty',  1, '{"kb_ids":[],"kb_id":"faq"}', NULL, NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-off',    0, '{"kb_ids":["faq"]}', NULL, NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-audience', 1, '{"kb_ids":["faq"]}', '{"roles":["manager"],"tenants":"tenant-7, tenant-8"}', NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-audience-off', 1, '{"kb_ids":["faq"]}', '{"enabled":false,"roles":["nobody"]}', NULL, NULL, '2026-01-01 00:00:00'),
  ('KB-Case',   1, '{"kb_ids":["FAQ"]}', NULL, NULL, NULL, '2026-01-01 00:00:00'),
  ('kb-quirky', 1, '{"kb_ids":[" faq ",""],"top_k":"7","min_score":null,"inject":"DOC","max_docs":99,"page_boost":"true"}',
                   NULL, NULL, NULL, '2026-01-01 00:00:00');

-- Knowledge bases: 'kb-missing' deliberately has no row (deleted).
INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES
  ('faq',         1, '2026-01-01 00:00:00'),
  ('manuals',     1, '2026-01-01 00:00:00'),
  ('kb-disabled', 0, '2026-01-01 00:00:00'),
  ('other-kb',    1, '2026-01-01 00:00:00');

INSERT INTO bz_kb_docs (doc_id, kb_id, source_key, title, content, content_hash, status, chunk_count, created_at, updated_at) VALUES
  (101, 'faq', 'refund', 'Refund window', 'Refunds are accepted within 30 days of delivery.',
        MD5(CONCAT('Refund window', CHAR(0), 'Refunds are accepted within 30 days of delivery.')),
        'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:10:00'),
  (102, 'faq', NULL, '退款政策 🚀', '退款窗口为三十天。设为0表示不允许退款 🙅‍♀️ — ça va?',
        NULL, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:20:00'),
  (103, 'faq', 'embedding', 'Embedding doc', 'Body that is being embedded.',
        MD5(CONCAT('Embedding doc', CHAR(0), 'Body that is being embedded.')),
        'embedding', 0, '2026-01-01 00:00:00', '2026-01-01 00:30:00'),
  (104, 'manuals', 'broken', 'Broken doc', 'Body that failed to embed.',
        MD5(CONCAT('Broken doc', CHAR(0), 'Body that failed to embed.')),
        'error', 0, '2026-01-01 00:00:00', '2026-01-01 00:40:00'),
  (105, 'manuals', 'big', 'Big manual', REPEAT('知识库0123456', 30000),
        MD5(CONCAT('Big manual', CHAR(0), REPEAT('知识库0123456', 30000))),
        'ready', 429, '2026-01-01 00:00:00', '2026-01-01 00:50:00'),
  (106, 'kb-disabled', NULL, 'Disabled KB doc', 'Body in a disabled knowledge base.',
        NULL, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 01:00:00'),
  (107, 'other-kb', NULL, 'Foreign KB doc', 'Body in a knowledge base no route uses.',
        NULL, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 01:10:00');

INSERT INTO bz_agent_sessions (session_id, client_app_id, principal_json, on_behalf_of, allowed_routes,
                               access_token_hash, access_expires_at, refresh_expires_at, revoked_at) VALUES
  ('a0000000-0000-4000-8000-00000000000a', 'app-a',
   '{"id":"user-42","tenant":"tenant-7","roles":["manager"],"audience":"internal"}', 'tenant-7:user-42',
   '["kb-multi","kb-legacy"]', REPEAT('a', 64), '2026-01-01 00:15:00', '2026-01-31 00:00:00', NULL),
  ('b0000000-0000-4000-8000-00000000000b', 'app-b',
   '{"id":"user-7","roles":[]}', 'user-7',
   '["kb-multi"]', REPEAT('b', 64), '2026-01-01 00:15:00', '2026-01-31 00:00:00', NULL);

INSERT INTO bz_agent_client_runs (run_id, session_id, client_app_id, route_key, status, context_json,
                                  created_at, updated_at, completed_at) VALUES
  ('c0ffee00-0000-4000-8000-000000000001', 'a0000000-0000-4000-8000-00000000000a', 'app-a', 'kb-multi',
   'context_ready', '{"context":{"knowledge":[],"knowledge_refs":[{"ref":"knowledge:1","doc_id":101,"title":"Refund window","score":0.82}]}}',
   '2026-01-01 00:01:00', '2026-01-01 00:01:05', NULL),
  ('c0ffee00-0000-4000-8000-000000000002', 'a0000000-0000-4000-8000-00000000000a', 'app-a', 'kb-multi',
   'completed', '{"context":{"knowledge":[],"knowledge_refs":[]}}',
   '2026-01-01 00:02:00', '2026-01-01 00:05:00', '2026-01-01 00:05:00'),
  ('c0ffee00-0000-4000-8000-000000000003', 'b0000000-0000-4000-8000-00000000000b', 'app-b', 'kb-multi',
   'context_ready', '{"context":{"knowledge":[],"knowledge_refs":[]}}',
   '2026-01-01 00:03:00', '2026-01-01 00:03:05', NULL),
  ('c0ffee00-0000-4000-8000-000000000004', 'a0000000-0000-4000-8000-00000000000a', 'app-a', 'kb-multi',
   'preparing', NULL, '2026-01-01 00:04:00', '2026-01-01 00:04:00', NULL);

INSERT INTO bz_clients (app_id, token, enabled, allowed_routes, agent_authorize_url) VALUES
  ('app-a', '0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a', 1, '["kb-multi","kb-legacy","kb-null","kb-empty","kb-off","kb-audience","kb-audience-off","kb-quirky"]',
           'https://app-a.example/agent/authorize'),
  ('app-b', '0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b', 1, '["kb-multi"]', 'https://app-b.example/agent/authorize'),
  ('app-star', '0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c', 1, '["*"]', 'https://star.example/agent/authorize'),
  ('app-off', '0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d', 0, '["*"]', 'https://off.example/agent/authorize'),
  ('app-nourl', '0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e', 1, '["*"]', NULL),
  ('app-null', '0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f', 1, NULL, 'https://null.example/agent/authorize'),
  ('App-Case', '1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a', 1, '["*"]', 'https://case.example/agent/authorize');
