// Galera: what relay must know about a MariaDB Galera / Percona XtraDB Cluster node.
//
// Invariant: a node is taken for a Galera node only when it says so (wsrep_on=ON with a provider
// loaded), never from a version string; on such a node every session relay opens through a
// CausalReads pool runs with wsrep_sync_wait=1, so each read first waits until the node applied
// everything the cluster committed before it (a new owner on another node never resumes from
// offsets older than the last commit). On any other server nothing is set.

package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/relay-sh/relay/internal/fault"
)

// SyncWaitReads is the wsrep_sync_wait bit for reads (SELECT, SHOW, BEGIN / START TRANSACTION).
const SyncWaitReads = 1

// Galera is what a node tells about its cluster.
type Galera struct {
	On          bool   // wsrep_on=ON and a provider is loaded
	Provider    string // wsrep_provider (the library path)
	ClusterSize string // wsrep_cluster_size
	Status      string // wsrep_cluster_status: Primary, or non-Primary / Disconnected
	State       string // wsrep_local_state_comment: Synced, Donor/Desynced, Joining..
	Ready       bool   // wsrep_ready: the node accepts queries
	Node        string // wsrep_gcomm_uuid: this node process, unique in the cluster
}

// String describes the node for logs and preflight.
func (g Galera) String() string {
	if !g.On {
		return "not a Galera node"
	}
	return fmt.Sprintf("Galera node (wsrep_on=ON, provider %s, cluster size %s, %s, %s)", g.Provider, g.ClusterSize, g.Status, g.State)
}

// querier runs queries: a pool, a connection or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ReadGalera reads the node's wsrep variables and status; a server without them (MySQL, a MariaDB
// built without wsrep) is simply not a Galera node. SHOW is answered even by a node outside the
// primary component, which refuses every other query.
func ReadGalera(ctx context.Context, q querier) (Galera, error) {
	var g Galera
	vars, err := show(ctx, q, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider')")
	if err != nil {
		return g, fmt.Errorf("read wsrep_on: %w", err)
	}
	g.Provider, g.On = vars["wsrep_provider"], wsrepOn(vars)
	if !g.On {
		return g, nil
	}
	st, err := show(ctx, q, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_cluster_status', 'wsrep_local_state_comment', 'wsrep_gcomm_uuid', 'wsrep_ready')")
	if err != nil {
		return g, fmt.Errorf("read wsrep status: %w", err)
	}
	g.ClusterSize, g.Status, g.State, g.Node = st["wsrep_cluster_size"], st["wsrep_cluster_status"], st["wsrep_local_state_comment"], st["wsrep_gcomm_uuid"]
	g.Ready = strings.EqualFold(st["wsrep_ready"], "ON")
	return g, nil
}

// CheckPrimary fails with fault.ErrNotPrimary when db's node is a Galera node outside the primary
// component (or not ready for queries); nil on any other server.
func CheckPrimary(ctx context.Context, db querier) error {
	g, err := ReadGalera(ctx, db)
	if err != nil {
		return err
	}
	return g.Err()
}

// Err is fault.ErrNotPrimary, describing the node, when g is a Galera node outside the primary
// component (wsrep_cluster_status not Primary) or not ready for queries (wsrep_ready OFF); nil on
// any other server.
func (g Galera) Err() error {
	if g.On && (!strings.EqualFold(g.Status, "Primary") || !g.Ready) {
		return fmt.Errorf("%w: %s", fault.ErrNotPrimary, g)
	}
	return nil
}

// wsrepOn tells a Galera node from the values of wsrep_on and wsrep_provider.
func wsrepOn(vars map[string]string) bool {
	p := vars["wsrep_provider"]
	return strings.EqualFold(vars["wsrep_on"], "ON") && p != "" && !strings.EqualFold(p, "none")
}

func show(ctx context.Context, q querier, query string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[strings.ToLower(k)] = v
	}
	return out, rows.Err()
}

// causalConnector turns on causal reads on every new session of a Galera node (one SHOW per
// connection to find out): a proxy may send each connection to another node, so each asks its own.
type causalConnector struct{ driver.Connector }

func (c causalConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := causal(ctx, conn); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("session setup (causal reads): %w", err)
	}
	return conn, nil
}

func causal(ctx context.Context, conn driver.Conn) error {
	qc, ok1 := conn.(driver.QueryerContext)
	ec, ok2 := conn.(driver.ExecerContext)
	if !ok1 || !ok2 {
		return fmt.Errorf("driver connection %T cannot query", conn)
	}
	vals, err := showConn(ctx, qc, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider')")
	if err != nil {
		return err
	}
	if !wsrepOn(vals) {
		return nil
	}
	// A node outside the primary component would fail every later read of this session, the
	// pool's own setup included, as a lock wait timeout (the causal wait cannot end): say what it is.
	st, err := showConn(ctx, qc, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_status', 'wsrep_ready')")
	if err != nil {
		return err
	}
	if !strings.EqualFold(st["wsrep_cluster_status"], "Primary") || !strings.EqualFold(st["wsrep_ready"], "ON") {
		return fmt.Errorf("%w (wsrep_cluster_status %s, wsrep_ready %s)", fault.ErrNotPrimary, st["wsrep_cluster_status"], st["wsrep_ready"])
	}
	_, err = ec.ExecContext(ctx, fmt.Sprintf("SET SESSION wsrep_sync_wait = %d", SyncWaitReads), nil)
	return err
}

// showConn runs a SHOW of name/value rows on a driver connection.
func showConn(ctx context.Context, qc driver.QueryerContext, query string) (map[string]string, error) {
	rows, err := qc.QueryContext(ctx, query, nil)
	if err != nil {
		return nil, err
	}
	vals := map[string]string{}
	row := make([]driver.Value, len(rows.Columns()))
	for {
		err := rows.Next(row)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = rows.Close()
			return nil, err
		}
		vals[strings.ToLower(asString(row[0]))] = asString(row[1])
	}
	return vals, rows.Close()
}

func asString(v driver.Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}
