GRANT SELECT (session_id, first_task_id) ON `{{db}}`.bz_agent_task_enforcements TO {{user}};
GRANT SELECT (run_id, task_id, session_id) ON `{{db}}`.bz_agent_task_runs TO {{user}};
GRANT SELECT (task_id, state, policy_json) ON `{{db}}`.bz_agent_tasks TO {{user}};
GRANT SELECT (task_id, member_key, session_id, client_app_id, route_key, client_conversation_id) ON `{{db}}`.bz_agent_task_members TO {{user}};
GRANT SELECT (task_id) ON `{{db}}`.bz_agent_task_invocations TO {{user}};
GRANT SELECT (task_id) ON `{{db}}`.bz_agent_task_events TO {{user}};
GRANT SELECT (client_conversation_id) ON `{{db}}`.bz_agent_client_runs TO {{user}};
GRANT SELECT (session_id, client_app_id, principal_json, on_behalf_of, allowed_routes, refresh_expires_at, revoked_at) ON `{{db}}`.bz_agent_sessions TO {{user}};
GRANT SELECT (tools, agent_client) ON `{{db}}`.bz_routes TO {{user}};
