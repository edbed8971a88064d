-- The six task-control tables of Core 0.8 (migration 062), written for these
-- tests from the facts in shared/core/TASK_CONTROL.md §1 (never copied from
-- Core): UUID and hash columns ascii_bin (case-sensitive), client, route and
-- conversation ids utf8mb4_bin, DATETIME(3) UTC times, JSON policy and tool
-- lists, no foreign keys. Loaded only by (*DB).InstallTaskControl: the base
-- schema is a pre-0.8 Core.

CREATE TABLE bz_agent_tasks (
  task_id         CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  create_key      CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  create_hash     CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  scope_hash      CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  state           VARCHAR(16)  NOT NULL,
  revision        BIGINT UNSIGNED NOT NULL,
  ledger_sequence BIGINT UNSIGNED NOT NULL,
  policy_json     JSON         NOT NULL,
  write_reserved  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  write_consumed  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  active_permits  INT UNSIGNED NOT NULL DEFAULT 0,
  created_by      VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at      DATETIME(3)  NOT NULL,
  updated_at      DATETIME(3)  NOT NULL,
  PRIMARY KEY (task_id),
  UNIQUE KEY uk_agent_task_create (create_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bz_agent_task_members (
  task_id                CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  member_key             CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  session_id             CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  identity_hash          CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  client_app_id          VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  route_key              VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  client_conversation_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  allowed_tools_json     JSON         NOT NULL,
  PRIMARY KEY (task_id, member_key),
  KEY idx_agent_task_member_session (session_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bz_agent_task_enforcements (
  session_id    CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  first_task_id CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_by    VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at    DATETIME(3)  NOT NULL,
  PRIMARY KEY (session_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bz_agent_task_invocations (
  session_id    CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  invocation_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  task_id       CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (session_id, invocation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bz_agent_task_runs (
  run_id     CHAR(36)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  task_id    CHAR(36)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  session_id CHAR(36)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (run_id),
  KEY idx_agent_task_runs (task_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bz_agent_task_events (
  task_id     CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sequence    BIGINT UNSIGNED NOT NULL,
  detail_json JSON     NULL,
  PRIMARY KEY (task_id, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
