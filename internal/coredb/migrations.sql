-- The migration rows of a pre-0.8 Core whose tables schema.sql holds: a
-- migrated Core records them, and the catalog's schema check looks for them.

INSERT INTO bz_schema_migrations (filename) VALUES
  ('001_init.sql'), ('002_routes.sql'), ('004_clients.sql'), ('008_kb.sql'),
  ('018_kb_ingest.sql'), ('019_kb_datasources.sql'), ('047_route_audience.sql'),
  ('055_agent_auth.sql'), ('056_agent_client_runtime.sql'), ('059_agent_subject_display.sql');
