package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Managed tasks of Core ≥ 0.8 (shared/core/TASK_CONTROL.md): the presence
// probe (K0) and the read-only snapshot the knowledge rules are decided on
// (K1–K6, joined into one statement: TaskSnapshot).

// TaskTables are the six tables of Core's migration 062.
var TaskTables = []string{
	"bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements",
	"bz_agent_task_invocations", "bz_agent_task_runs", "bz_agent_task_events",
}

// TaskMigration is the Core migration that creates TaskTables.
const TaskMigration = "062_agent_task_control.sql"

// Catalog query names of the task queries.
const (
	QueryTaskPresence = "task_presence"
	QueryTask         = "task"
)

// The task queries (TASK_CONTROL.md §5). qTaskPresence is K0 plus the
// migration row: information_schema lists only the tables the read-only user
// holds a privilege on, so 062 recorded with fewer than six visible tables
// (grants not given yet) is partial, never absent.
const (
	qTaskPresence = "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (%s)"
	qTaskMigrated = "SELECT filename FROM bz_schema_migrations WHERE filename = ?"
	// K1 marker, K2 binding and run, K4 task, K5 members and K6 every
	// member's session, client and route, joined into one statement: one
	// consistent read (one snapshot) and one round trip. One row per member,
	// or a single row of NULLs past the marker when the run is not bound.
	qTaskSnapshot = "SELECT e.first_task_id, b.task_id," +
		" r.session_id, r.client_app_id, r.route_key, r.client_conversation_id, r.status, r.completed_at," +
		" t.task_id, t.state, t.policy_json," +
		" m.member_key, m.session_id, m.client_app_id, m.route_key, m.client_conversation_id," +
		" s.session_id, s.client_app_id, s.principal_json, s.on_behalf_of, s.allowed_routes, s.refresh_expires_at, s.revoked_at," +
		" c.app_id, c.enabled, c.allowed_routes, c.agent_authorize_url," +
		" rt.route_key, rt.enabled, rt.audience, rt.tools, rt.agent_client" +
		" FROM (SELECT 1 AS one) x" +
		" LEFT JOIN bz_agent_task_enforcements e ON e.session_id = ?" +
		" LEFT JOIN bz_agent_task_runs b ON b.run_id = ? AND b.session_id = ?" +
		" LEFT JOIN bz_agent_client_runs r ON r.run_id = b.run_id" +
		" LEFT JOIN bz_agent_tasks t ON t.task_id = b.task_id" +
		" LEFT JOIN bz_agent_task_members m ON m.task_id = b.task_id" +
		" LEFT JOIN bz_agent_sessions s ON s.session_id = m.session_id" +
		" LEFT JOIN bz_clients c ON c.app_id = m.client_app_id" +
		" LEFT JOIN bz_routes rt ON rt.route_key = m.route_key"
)

// memberRows is one task member with the rows Core revalidates it against.
type memberRows struct {
	corefacts.TaskMember
	session *memberSession // nil when the bz_agent_sessions row is missing
	client  *memberClient
	route   *memberRoute
}

// member is the member as package core holds it: the rows' checks decided
// (rowsValid), the refresh expiry kept for the decision's time.
func (m memberRows) member() corefacts.TaskMember {
	tm := m.TaskMember
	tm.RowsValid = m.rowsValid()
	if m.session != nil && m.session.refreshExpires.Valid {
		tm.RefreshExpires = m.session.refreshExpires.Time
	}
	return tm
}

type memberSession struct {
	id, clientAppID         string
	principal               []byte
	onBehalfOf              string
	allowedRoutes           []byte
	refreshExpires, revoked sql.NullTime
}

type memberClient struct {
	id            string
	enabled       bool
	allowedRoutes []byte
	authorizeURL  string
}

type memberRoute struct {
	key                    string
	enabled                bool
	audience, tools, agent []byte
}

// rowsValid is Core's verifyMembers for this member (TASK_CONTROL.md §2),
// without the optional identity-hash recomputation and without the refresh
// expiry (corefacts.TaskMember.Valid checks it against the decision's time): the
// rows exist with exactly the member's ids; client and route enabled;
// session not revoked; an authorize URL; principal id a string and roles a string array;
// the route (or "*") in both the session's and the client's allowed_routes,
// which must be string arrays; tools.agent_direct.enabled === true and
// agent_client.enabled !== false; the route's audience policy allows the
// principal with this member's client.
func (m memberRows) rowsValid() bool {
	s, c, r := m.session, m.client, m.route
	if s == nil || c == nil || r == nil ||
		s.id != m.SessionID || s.clientAppID != m.ClientAppID || c.id != m.ClientAppID || r.key != m.RouteKey {
		return false
	}
	if !c.enabled || !r.enabled || s.revoked.Valid || strings.TrimSpace(c.authorizeURL) == "" {
		return false
	}
	pr, hasChannel, ok := memberPrincipal(s.principal)
	if !ok {
		return false
	}
	sessionRoutes, ok1 := strictStringArray(s.allowedRoutes)
	clientRoutes, ok2 := strictStringArray(c.allowedRoutes)
	if !ok1 || !ok2 || !routeListed(sessionRoutes, m.RouteKey) || !routeListed(clientRoutes, m.RouteKey) {
		return false
	}
	tools, err := decodeObject(r.tools)
	if err != nil || tools == nil {
		return false
	}
	direct, _ := tools["agent_direct"].(map[string]any)
	if direct == nil || direct["enabled"] != true {
		return false
	}
	if ac, err := decodeObject(r.agent); err != nil || ac != nil && ac["enabled"] == false {
		return false
	}
	policy, err := normalizeAudience(r.audience)
	if err != nil {
		return false
	}
	pr.clientAppID = m.ClientAppID
	if !hasChannel { // principal.channel ?? "agent:<client>"
		pr.channel = "agent:" + m.ClientAppID
	}
	return policy.allows(pr)
}

// memberPrincipal decodes principal_json: id must be a string and roles a
// string array (Core's verifyMembers); tenant, audience and channel are
// optional strings. hasChannel is false when channel is absent or null.
func memberPrincipal(raw []byte) (p *audiencePrincipal, hasChannel, ok bool) {
	obj, err := decodeObject(raw)
	if err != nil || obj == nil {
		return nil, false, false
	}
	id, ok := obj["id"].(string)
	if !ok {
		return nil, false, false
	}
	rolesAny, ok := obj["roles"].([]any)
	if !ok {
		return nil, false, false
	}
	p = &audiencePrincipal{id: id}
	for _, r := range rolesAny {
		s, ok := r.(string)
		if !ok {
			return nil, false, false
		}
		p.roles = append(p.roles, s)
	}
	p.tenant, _ = obj["tenant"].(string)
	p.audience, _ = obj["audience"].(string)
	ch, present := obj["channel"]
	p.channel, _ = ch.(string)
	return p, present && ch != nil, true
}

// strictStringArray is Core's stringArray: a JSON array of strings, anything
// else (NULL included) is invalid.
func strictStringArray(raw []byte) ([]string, bool) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, false
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

var taskExpiryPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$`)

// ErrTaskPolicyInvalid: a stored policy_json that Core's policy
// normalization would reject (Core answers 400 TASK_INVALID_INPUT).
var ErrTaskPolicyInvalid = errors.New("stored task policy is not valid")

// TaskExpiry parses a stored policy_json, as Core's normalizeAgentTaskPolicy
// does: an object with maxWriteCalls (null or an integer 0..1e9),
// maxConcurrent (an integer 1..10000) and expiresAt (null or an ISO instant,
// year ≥ 1000). It returns the expiry (nil: none). Other keys are ignored.
func TaskExpiry(policy []byte) (*time.Time, error) {
	obj, err := decodeObject(policy)
	if err != nil || obj == nil {
		return nil, ErrTaskPolicyInvalid
	}
	if v, ok := obj["maxWriteCalls"]; !ok || v != nil && !jsonIntIn(v, 0, 1e9) {
		return nil, ErrTaskPolicyInvalid
	}
	if !jsonIntIn(obj["maxConcurrent"], 1, 10000) {
		return nil, ErrTaskPolicyInvalid
	}
	v, ok := obj["expiresAt"]
	if !ok {
		return nil, ErrTaskPolicyInvalid
	}
	if v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok || !taskExpiryPattern.MatchString(s) {
		return nil, ErrTaskPolicyInvalid
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1000 {
		return nil, ErrTaskPolicyInvalid
	}
	t = t.UTC()
	return &t, nil
}

func jsonIntIn(v any, lo, hi int64) bool {
	n, ok := v.(interface{ Int64() (int64, error) })
	if !ok {
		return false
	}
	i, err := n.Int64()
	return err == nil && i >= lo && i <= hi
}

// TaskPresence (K0) probes the task-control tables. It is meant for the
// schema gate's periodic check and for a one-shot probe (check-config
// --probe): absent, partial or enforced, or an error when the catalog cannot
// answer.
func (c *SQLCatalog) TaskPresence(ctx context.Context) (corefacts.TaskControlState, error) {
	visible, migrated := 0, false
	err := c.do(ctx, QueryTaskPresence, func(ctx context.Context) error {
		visible, migrated = 0, false
		err := c.eachString(ctx, fmt.Sprintf(qTaskPresence, placeholders(len(TaskTables))), anys(TaskTables), func(name string) {
			if slices.Contains(TaskTables, strings.ToLower(name)) {
				visible++
			}
		})
		if err != nil {
			return err
		}
		var f string
		switch err := c.db.QueryRowContext(ctx, qTaskMigrated, TaskMigration).Scan(&f); {
		case err == nil:
			migrated = true
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		return nil
	})
	if err != nil {
		return corefacts.TaskControlUnknown, err
	}
	return presence(visible, migrated), nil
}

func presence(visible int, migrated bool) corefacts.TaskControlState {
	switch {
	case visible == len(TaskTables):
		return corefacts.TaskControlEnforced
	case visible == 0 && !migrated:
		return corefacts.TaskControlAbsent
	default:
		return corefacts.TaskControlPartial
	}
}

// TaskSnapshot reads what the task rules need for (session, run) with one
// statement (qTaskSnapshot): the marker, the run's binding and row, the task,
// its members and every member's session, client and route. A single SELECT
// is one consistent read of one InnoDB snapshot, which is what K0–K6 inside a
// START TRANSACTION READ ONLY would give, without the two extra round trips
// of START TRANSACTION and COMMIT. runID "" reads only the marker (the other
// joins find nothing). It assumes the tables are present (the schema gate
// decides that). Ids are bound lower-cased: the task tables compare them
// case-sensitively.
//
// Errors: the catalog unreachable → wraps ErrUnavailable; the database
// answered with an error (missing grant or column, server error) → wraps
// ErrTaskUnavailable.
func (c *SQLCatalog) TaskSnapshot(ctx context.Context, sessionID, runID string) (corefacts.TaskSnapshot, error) {
	sessionID, runID = strings.ToLower(sessionID), strings.ToLower(runID)
	var snap corefacts.TaskSnapshot
	err := c.do(ctx, QueryTask, func(ctx context.Context) error {
		snap = corefacts.TaskSnapshot{Enforced: true}
		stmt, err := c.taskStmt(ctx)
		if err != nil {
			return taskQueryError(err)
		}
		rows, err := stmt.QueryContext(ctx, sessionID, runID, sessionID)
		if err != nil {
			return taskQueryError(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scanTaskRow(rows, &snap); err != nil {
				return taskQueryError(err)
			}
		}
		return taskQueryError(rows.Err())
	})
	if err != nil {
		return corefacts.TaskSnapshot{}, err
	}
	// Core's member order, sorted here: an ORDER BY on this join makes
	// MariaDB build an on-disk temporary table (the JSON columns are TEXT),
	// which doubled the statement's server time and gave it a long tail.
	slices.SortFunc(snap.Members, func(a, b corefacts.TaskMember) int { return strings.Compare(a.Key, b.Key) })
	return snap, nil
}

// taskStmt is qTaskSnapshot prepared once (database/sql re-prepares it on
// each pooled connection as needed), so a request costs one execute round
// trip instead of prepare + execute, and the server parses the join once per
// connection.
func (c *SQLCatalog) taskStmt(ctx context.Context) (*sql.Stmt, error) {
	c.taskMu.Lock()
	defer c.taskMu.Unlock()
	if c.taskPrepared != nil {
		return c.taskPrepared, nil
	}
	st, err := c.db.PrepareContext(ctx, qTaskSnapshot)
	if err != nil {
		return nil, err
	}
	c.taskPrepared = st
	return st, nil
}

// scanTaskRow adds one row of qTaskSnapshot to snap.
func scanTaskRow(rows *sql.Rows, snap *corefacts.TaskSnapshot) error {
	var marker, bound sql.NullString
	var rSess, rClient, rRoute, rConv, rStatus sql.NullString
	var rCompleted sql.NullTime
	var tID, tState sql.NullString
	var tPolicy []byte
	var mKey, mSess, mClient, mRoute, mConv sql.NullString
	var sID, sClient, sOBO sql.NullString
	var sPrincipal, sRoutes []byte
	var sRefresh, sRevoked sql.NullTime
	var cID, cURL sql.NullString
	var cEnabled sql.NullInt64
	var cRoutes []byte
	var rtKey sql.NullString
	var rtEnabled sql.NullInt64
	var rtAudience, rtTools, rtAgent []byte
	if err := rows.Scan(&marker, &bound,
		&rSess, &rClient, &rRoute, &rConv, &rStatus, &rCompleted,
		&tID, &tState, &tPolicy,
		&mKey, &mSess, &mClient, &mRoute, &mConv,
		&sID, &sClient, &sPrincipal, &sOBO, &sRoutes, &sRefresh, &sRevoked,
		&cID, &cEnabled, &cRoutes, &cURL,
		&rtKey, &rtEnabled, &rtAudience, &rtTools, &rtAgent); err != nil {
		return err
	}
	snap.Marked = marker.Valid
	snap.Bound = bound.Valid
	if snap.Bound && rSess.Valid && snap.Run == nil {
		r := &corefacts.TaskRun{SessionID: rSess.String, ClientAppID: rClient.String, RouteKey: rRoute.String,
			Conversation: rConv.String, Status: rStatus.String}
		if rCompleted.Valid {
			t := rCompleted.Time.UTC()
			r.CompletedAt = &t
		}
		snap.Run = r
	}
	if tID.Valid && snap.Task == nil {
		expiry, err := TaskExpiry(tPolicy)
		snap.Task = &corefacts.TaskRow{State: tState.String, PolicyValid: err == nil, Expiry: expiry}
	}
	if !mSess.Valid { // unbound, or a task without members
		return nil
	}
	m := memberRows{TaskMember: corefacts.TaskMember{Key: mKey.String, SessionID: mSess.String, ClientAppID: mClient.String, RouteKey: mRoute.String, Conversation: mConv.String}}
	if sID.Valid {
		m.session = &memberSession{id: sID.String, clientAppID: sClient.String, principal: sPrincipal,
			onBehalfOf: sOBO.String, allowedRoutes: sRoutes, refreshExpires: sRefresh, revoked: sRevoked}
	}
	if cID.Valid {
		m.client = &memberClient{id: cID.String, enabled: cEnabled.Int64 != 0, allowedRoutes: cRoutes, authorizeURL: cURL.String}
	}
	if rtKey.Valid {
		m.route = &memberRoute{key: rtKey.String, enabled: rtEnabled.Int64 != 0, audience: rtAudience, tools: rtTools, agent: rtAgent}
	}
	snap.Members = append(snap.Members, m.member())
	return nil
}

// taskQueryError marks an error of the database itself (it answered: a
// missing grant, table or column, a server error) as ErrTaskUnavailable, so
// classify passes it through without tripping the breaker. Transport errors
// and timeouts stay as they are (classify makes them unavailable).
func taskQueryError(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Errorf("%w: task query: server error %d", corefacts.ErrTaskUnavailable, me.Number)
	}
	return err
}

// TaskPresence of the in-memory catalog: it has no task tables.
func (m *MemCatalog) TaskPresence(context.Context) (corefacts.TaskControlState, error) {
	if err := m.rlock(); err != nil {
		return corefacts.TaskControlUnknown, err
	}
	m.mu.RUnlock()
	return corefacts.TaskControlAbsent, nil
}

// TaskSnapshot of the in-memory catalog: task control is absent.
func (m *MemCatalog) TaskSnapshot(context.Context, string, string) (corefacts.TaskSnapshot, error) {
	return corefacts.TaskSnapshot{}, nil
}
