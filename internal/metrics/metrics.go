// Package metrics defines every Prometheus series relay exports.
//
// Invariant: all series carry the relay_ prefix, base units and bounded labels (no tags, offsets or
// payloads as label values); every family is registered up front so dashboards see zeros, not gaps.
package metrics

import (
	"database/sql"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relay-sh/relay/internal/fault"
)

// Version is set at build time (-ldflags "-X .../metrics.Version=...").
var Version = "dev"

// Origins of a transaction action.
const (
	OriginNormal   = "normal"
	OriginRecovery = "recovery"
	OriginManual   = "manual"
	OriginResolver = "resolver"
)

// Metrics is the set of collectors of one relay process.
type Metrics struct {
	Registry *prometheus.Registry

	PendingTransactions prometheus.Gauge
	InDoubtBranches     prometheus.Gauge
	InDoubtOldestAge    prometheus.Gauge
	Checkpoints         *prometheus.CounterVec
	PhaseDuration       *prometheus.HistogramVec
	Transactions        *prometheus.CounterVec
	Records             *prometheus.CounterVec
	UpsertedRows        *prometheus.CounterVec
	BadRecords          *prometheus.CounterVec
	ConsumerLag         *prometheus.GaugeVec
	LastCommittedID     prometheus.Gauge
	LastCommittedTime   prometheus.Gauge
	VisibilityLatency   prometheus.Histogram
	EndToEndLatency     prometheus.Histogram
	ThreadsConnected    prometheus.Gauge
	ready               atomic.Pointer[func() bool] // SetReadiness; nil reads as not ready
	Recoveries          prometheus.Counter
	Takeovers           prometheus.Counter
	Restarts            *prometheus.CounterVec
	FenceTakeovers      *prometheus.CounterVec
	// Membership (docs/PROTOCOL.md, "Group membership").
	AssignedPartitions prometheus.Gauge
	TopicPartitions    prometheus.Gauge
	Rebalances         *prometheus.CounterVec
	RevokeDrain        prometheus.Histogram
	PartitionTakeover  prometheus.Histogram
	FencedDecisions    prometheus.Counter
	// The schema registry (a registry input format): asks that found it unavailable, and whether
	// the poll waits for it now.
	RegistryUnavailable prometheus.Counter
	RegistryWaiting     prometheus.Gauge
	SchemasResolved     prometheus.Counter
	SchemasEvicted      prometheus.Counter
	// StartupWaits counts the start-up's attempts that found a dependency not serving yet.
	StartupWaits *prometheus.CounterVec
}

// Dependencies are the services start-up waits for: the values of relay_startup_waits_total's
// dependency label.
var Dependencies = []string{"mysql", "galera", "kafka", "schema_registry"}

// New builds and registers every collector; job becomes the relay_job constant label.
func New(job string) *Metrics {
	reg := prometheus.NewRegistry()
	r := prometheus.WrapRegistererWith(prometheus.Labels{"relay_job": job}, reg)
	f := factory{r}
	m := &Metrics{
		Registry: reg,
		PendingTransactions: f.gauge("relay_xa_pending_transactions",
			"Branches of this process that are prepared and not yet committed or rolled back."),
		InDoubtBranches: f.gauge("relay_xa_in_doubt_branches",
			"Prepared branches of this job listed by XA RECOVER at the last resolver pass that this process does not own."),
		InDoubtOldestAge: f.gauge("relay_xa_in_doubt_oldest_age_seconds",
			"Age of the oldest in-doubt branch of this job at the resolver's last pass: since its checkpoint's decision, else since a relay first listed it (kept in the ledger across restarts); 0 when none."),
		Checkpoints: f.counterVec("relay_checkpoints_total",
			"Checkpoints by result: committed, failed, or empty (nothing new to commit).", "result"),
		PhaseDuration: f.histogramVec("relay_checkpoint_phase_duration_seconds",
			"Checkpoint duration by phase: flush, prepare, decide, commit, total.", "phase"),
		Transactions: f.counterVec("relay_transactions_total",
			"XA transaction actions by action (prepare, commit, rollback) and origin (normal, recovery, resolver, manual).", "action", "origin"),
		Records: f.counterVec("relay_records_total",
			"Kafka records processed by result: ok, dlq, skipped.", "result"),
		UpsertedRows: f.counterVec("relay_upserted_rows_total",
			"Rows upserted into each aggregate table by committed checkpoints: one per distinct key per checkpoint (a checkpoint's write cost, which its records do not show).", "table"),
		BadRecords: f.counterVec("relay_bad_records_total",
			"Bad input records by reason.", "reason"),
		ConsumerLag: f.gaugeVec("relay_consumer_lag_records",
			"Records between the committed checkpoint's offset and the partition's high watermark.", "topic", "partition"),
		LastCommittedID: f.gauge("relay_last_committed_checkpoint_id",
			"Id of the last committed checkpoint."),
		LastCommittedTime: f.gauge("relay_last_committed_checkpoint_timestamp_seconds",
			"Unix time of the last committed checkpoint (or of the last idle checkpoint with nothing new)."),
		VisibilityLatency: f.histogram("relay_visibility_latency_seconds",
			"Per checkpoint, time from polling its oldest record to the commit that made it visible in MySQL."),
		EndToEndLatency: f.histogramBuckets("relay_end_to_end_latency_seconds",
			"Per checkpoint, time from the Kafka timestamp of its oldest record to the commit that made it visible: unlike relay_visibility_latency_seconds it includes the time records waited in Kafka (a backlog).",
			prometheus.ExponentialBuckets(0.01, 2, 20)),
		ThreadsConnected: f.gauge("relay_mysql_threads_connected",
			"Server-side Threads_connected of the sink MySQL (all clients)."),
		Recoveries: f.counter("relay_recoveries_total",
			"Recovery passes run (start-up and after a failed checkpoint)."),
		Takeovers: f.counter("relay_resolver_takeovers_total",
			"Times this instance's resolver took a stopped instance's fence to finish its branches."),
		Restarts: f.counterVec("relay_restarts_total",
			"In-process restarts of the pipeline (session torn down, recovered, started again) by cause: "+strings.Join(fault.Causes, ", ")+".", "cause"),
		FenceTakeovers: f.counterVec("relay_fence_takeovers_total",
			"Times this process ended an owner's sessions to take the job's fence: from an owner whose lease ran out (expired_lease) or from its own lock session cut off by the network (own).", "from"),
		AssignedPartitions: f.gauge("relay_assigned_partitions",
			"Partitions this process reads now: its consumer-group assignment (membership group) or its share p mod M == i (instances)."),
		TopicPartitions: f.gauge("relay_topic_partitions",
			"Partitions of the job's topics: with relay_assigned_partitions summed over the job's processes, a partition nobody reads shows."),
		Rebalances: f.counterVec("relay_rebalances_total",
			"Consumer-group rebalance events this member handled, by kind: assigned (partitions granted), revoked (handed back after a drain), lost (taken away without a drain: the session expired).", "kind"),
		RevokeDrain: f.histogramBuckets("relay_revoke_drain_seconds",
			"Per cooperative revocation, time from the group's revoke to handing the partitions back: the open epoch decided and the partitions released (or the session ended).",
			prometheus.ExponentialBuckets(0.01, 2, 14)),
		PartitionTakeover: f.histogramBuckets("relay_partition_takeover_seconds",
			"Per partition this member took on a grant of the group after another process decided it, time from that process's last decision to this member's first committed checkpoint of it: how long the partition went undecided across the hand-over (a graceful join or leave: about a checkpoint interval; a dead member: the group's session timeout and more).",
			[]float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 12.5, 15, 20, 30, 45, 60, 120, 300}),
		FencedDecisions: f.counter("relay_fenced_decisions_total",
			"Checkpoints whose decision was refused because this process no longer held what it decided: a partition another member took (its owner epoch moved), or its fence and lease. Nothing of them was committed."),
		RegistryUnavailable: f.counter("relay_schema_registry_unavailable_total",
			"Asks for a record's writer schema that found the schema registry unreachable, slow or failing (a registry input.format: avro, protobuf, json_schema). The record waits and is asked for again, backing off up to 5s: it is never dead-lettered for it."),
		SchemasResolved: f.counter("relay_schemas_resolved_total",
			"Writer schema ids a decoder fetched and resolved against the spec (a registry input.format): once per id each decoder (input.decoders) meets, and again only after an eviction. A steady rate means more schema ids in use than a decoder keeps (100)."),
		SchemasEvicted: f.counter("relay_schemas_evicted_total",
			"Resolved writer schemas a decoder dropped to stay within its bound (100 ids, oldest first); one is resolved again when a record of it comes."),
		RegistryWaiting: f.gauge("relay_schema_registry_waiting",
			"1 while the consume loop holds a record whose writer schema the registry cannot give (nothing after it is folded meanwhile), else 0."),
		StartupWaits: f.counterVec("relay_startup_waits_total",
			"Attempts at start-up that found a dependency not serving yet, by dependency: mysql (not answering), galera (the node outside the primary component), kafka (brokers not answering, or a topic missing). relay waits, backing off up to 5s, for as long as startup_wait_timeout allows (0: forever).", "dependency"),
	}
	Zero(m.StartupWaits, Dependencies)
	for _, k := range []string{"assigned", "revoked", "lost"} {
		m.Rebalances.WithLabelValues(k)
	}
	// Evaluated at each scrape, so relay_ready never disagrees with /readyz (a sampled gauge read 0
	// for up to its sampling period after /readyz turned 200).
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_ready",
		Help: "1 when recovery finished and the last checkpoint is recent (the /readyz verdict)."},
		func() float64 {
			if f := m.ready.Load(); f != nil && (*f)() {
				return 1
			}
			return 0
		}))
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_build_info",
		Help: "Build information; the value is 1."}, []string{"version", "goversion"})
	r.MustRegister(info)
	info.WithLabelValues(Version, runtime.Version()).Set(1)
	for _, res := range []string{"committed", "failed", "empty"} {
		m.Checkpoints.WithLabelValues(res)
	}
	for _, p := range []string{"flush", "prepare", "decide", "commit", "total"} {
		m.PhaseDuration.WithLabelValues(p)
	}
	for _, a := range []string{"prepare", "commit", "rollback"} {
		for _, o := range []string{OriginNormal, OriginRecovery, OriginResolver, OriginManual} {
			m.Transactions.WithLabelValues(a, o)
		}
	}
	for _, res := range []string{"ok", "dlq", "skipped"} {
		m.Records.WithLabelValues(res)
	}
	for _, from := range []string{"expired_lease", "own"} {
		m.FenceTakeovers.WithLabelValues(from)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetReadiness makes relay_ready report ready(), the rule /readyz answers with.
func (m *Metrics) SetReadiness(ready func() bool) { m.ready.Store(&ready) }

// WatchPool exports the connection pool of db as relay_mysql_pool_connections{pool,state}.
func (m *Metrics) WatchPool(job, pool string, db *sql.DB) {
	r := prometheus.WrapRegistererWith(prometheus.Labels{"relay_job": job, "pool": pool}, m.Registry)
	for state, read := range map[string]func(sql.DBStats) int{
		"open":   func(s sql.DBStats) int { return s.OpenConnections },
		"in_use": func(s sql.DBStats) int { return s.InUse },
		"idle":   func(s sql.DBStats) int { return s.Idle },
	} {
		read := read
		r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "relay_mysql_pool_connections",
			Help:        "Connections of relay's MySQL pools by state (open, in_use, idle).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 { return float64(read(db.Stats())) }))
	}
}

// Zero creates the series of v for each label value, so they exist at zero before the first
// increment (a label set known at start: restart causes, bad-record reasons, the spec's tables).
func Zero(v *prometheus.CounterVec, values []string) {
	for _, x := range values {
		v.WithLabelValues(x)
	}
}

type factory struct{ r prometheus.Registerer }

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.r.MustRegister(g)
	return g
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.r.MustRegister(c)
	return c
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(g)
	return g
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(c)
	return c
}

// Latency buckets from 5 ms to about 80 s: checkpoint phases and visibility at 200 ms..10 s intervals.
var latencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	f.r.MustRegister(h)
	return h
}

func (f factory) histogramBuckets(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.r.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
	f.r.MustRegister(h)
	return h
}
