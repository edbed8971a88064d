GRANT SELECT (filename) ON `{{db}}`.bz_schema_migrations TO {{user}};
GRANT SELECT (route_key, enabled, knowledge, audience) ON `{{db}}`.bz_routes TO {{user}};
GRANT SELECT (kb_id, enabled) ON `{{db}}`.bz_kb_bases TO {{user}};
GRANT SELECT (doc_id, kb_id, title, content, content_hash, status, updated_at) ON `{{db}}`.bz_kb_docs TO {{user}};
GRANT SELECT (run_id, session_id, client_app_id, route_key, status, completed_at) ON `{{db}}`.bz_agent_client_runs TO {{user}};
GRANT SELECT (app_id, enabled, allowed_routes, agent_authorize_url) ON `{{db}}`.bz_clients TO {{user}};
GRANT SELECT (rate_limit_per_min) ON `{{db}}`.bz_clients TO {{user}};
