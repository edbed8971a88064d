-- knowledge-sidecar's copy of Core's schema: the subset of BailingHub Core's tables and
-- columns the sidecar's read-only catalog may see (CORE_SCHEMA.md §8/§9),
-- written for the tests and the demo --sql rehearsal. Types keep what changes behaviour: unsigned
-- auto-increment doc ids, CHAR(36) run/session ids, VARCHAR(64) ids,
-- MEDIUMTEXT bodies, nullable CHAR(32) content hashes, DATETIME times,
-- TINYINT enabled flags, VARCHAR statuses, JSON columns (LONGTEXT with a
-- JSON_VALID check on MariaDB), utf8mb4 with a case-insensitive collation.
-- Columns outside the sidecar's GRANTs (tools, source_key, context_json, ...)
-- exist so the tests can show that the read-only user cannot read them; so
-- does bz_clients.token (Core keeps Client Tokens in plaintext), the column
-- the column-level GRANTs exist to protect.

CREATE TABLE bz_schema_migrations (
  filename VARCHAR(190) NOT NULL,
  PRIMARY KEY (filename)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_routes (
  route_key    VARCHAR(64) NOT NULL,
  enabled      TINYINT     NOT NULL DEFAULT 1,
  knowledge    JSON        NULL,
  audience     JSON        NULL,
  tools        JSON        NULL,
  agent_client JSON        NULL,
  updated_at   DATETIME    NOT NULL,
  PRIMARY KEY (route_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_kb_bases (
  kb_id      VARCHAR(64) NOT NULL,
  enabled    TINYINT     NOT NULL DEFAULT 1,
  updated_at DATETIME    NOT NULL,
  PRIMARY KEY (kb_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_kb_docs (
  doc_id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  kb_id        VARCHAR(64)     NOT NULL,
  source_key   VARCHAR(128)    NULL,
  title        VARCHAR(191)    NOT NULL,
  content      MEDIUMTEXT      NOT NULL,
  content_hash CHAR(32)        NULL,
  status       VARCHAR(16)     NOT NULL DEFAULT 'embedding',
  chunk_count  INT             NOT NULL DEFAULT 0,
  created_at   DATETIME        NOT NULL,
  updated_at   DATETIME        NOT NULL,
  PRIMARY KEY (doc_id),
  KEY idx_kb (kb_id),
  UNIQUE KEY uk_kb_source (kb_id, source_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_agent_client_runs (
  run_id        CHAR(36)    NOT NULL,
  session_id    CHAR(36)    NOT NULL,
  client_app_id VARCHAR(64) NOT NULL,
  route_key     VARCHAR(64) NOT NULL,
  -- Core has no default; '' lets the older fixtures and the fake Core's runs omit it.
  client_conversation_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  status        VARCHAR(24) NOT NULL DEFAULT 'preparing',
  context_json  JSON        NULL,
  created_at    DATETIME    NOT NULL,
  updated_at    DATETIME    NOT NULL,
  completed_at  DATETIME    NULL,
  PRIMARY KEY (run_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_agent_sessions (
  session_id         CHAR(36)     NOT NULL,
  client_app_id      VARCHAR(64)  NOT NULL,
  principal_json     JSON         NOT NULL,
  on_behalf_of       VARCHAR(191) NOT NULL,
  allowed_routes     JSON         NOT NULL,
  access_token_hash  CHAR(64)     NOT NULL,
  access_expires_at  DATETIME     NOT NULL,
  refresh_expires_at DATETIME     NOT NULL,
  revoked_at         DATETIME     NULL,
  PRIMARY KEY (session_id),
  UNIQUE KEY uk_access_hash (access_token_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE bz_clients (
  app_id              VARCHAR(64)   NOT NULL,
  token               CHAR(32)      NOT NULL,
  enabled             TINYINT       NOT NULL DEFAULT 1,
  allowed_routes      JSON          NULL,
  agent_authorize_url VARCHAR(2048) NULL,
  rate_limit_per_min  INT           NOT NULL DEFAULT 60,
  PRIMARY KEY (app_id),
  UNIQUE KEY uk_token (token)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
