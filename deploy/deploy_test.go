// Package deploy checks the deployment files (docker-compose.yml, Prometheus rules and config,
// the Grafana dashboard and its provisioning) against each other and against the binary.
//
// Invariant: everything an operator deploys refers only to things that exist: the compose file is
// valid for docker-compose and passes only configuration keys relay knows; every series a panel or
// an alert queries is one relay exports (a renamed metric must break this test, not a dashboard in
// production); every alert has a severity, a summary and a runbook link to a section that exists.
package deploy

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	_ "github.com/go-sql-driver/mysql" // sql.Open("mysql", ...) for WatchPool; no connection is made
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/metrics"
)

const (
	composeFile    = "../docker-compose.yml"
	alertsFile     = "prometheus/alerts.yml"
	alertsTestFile = "prometheus/alerts_test.yml"
	promConfigFile = "prometheus/prometheus.yml"
	dashboardFile  = "grafana/dashboards/relay.json"
	datasourceDir  = "grafana/provisioning/datasources"
	runbookFile    = "../docs/RUNBOOK.md"
)

// --- docker-compose ---------------------------------------------------------------------------

func TestComposeConfigValid(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		if os.Getenv("RELAY_TEST_REQUIRE") == "1" {
			t.Fatal("docker-compose is not installed (apt-get install -y docker-compose); RELAY_TEST_REQUIRE=1 forbids skipping")
		}
		t.Skip("docker-compose not installed")
	}
	cmd := exec.Command(bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = ".."
	// An unset variable would be interpolated as "" silently; make the file's own defaults apply.
	cmd.Env = withoutEnv(os.Environ(), "RELAY_VERSION")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("variable is not set")) {
		t.Fatalf("docker-compose config -q warns about unset variables:\n%s", out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		t.Logf("docker-compose config -q said:\n%s", out)
	}
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     any               `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   any               `yaml:"depends_on"` // a list, or a map with conditions
	Volumes     []string          `yaml:"volumes"`
	Profiles    []string          `yaml:"profiles"`
	Restart     string            `yaml:"restart"`
	Ports       []string          `yaml:"ports"`
}

func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	readYAML(t, composeFile, &doc, false)
	return doc.Services
}

// The compose file carries the contract's service set and wiring; the relay container gets only
// configuration keys relay knows (a typo such as RELAY_KAFKA_TOPIC would stop it at start-up).
func TestComposeWiring(t *testing.T) {
	svcs := loadCompose(t)
	for _, name := range []string{"kafka", "mysql", "relay", "loadgen", "prometheus", "grafana"} {
		if _, ok := svcs[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	known := map[string]bool{}
	for _, f := range config.Fields() {
		known[f.Env] = true
	}
	relay := svcs["relay"]
	for k := range relay.Environment {
		if strings.HasPrefix(k, "RELAY_") && !known[k] {
			t.Errorf("relay service sets %s, which is no configuration key (see docs/CONFIG.md)", k)
		}
	}
	want := map[string]string{
		"RELAY_JOB_NAME":      "orders",
		"RELAY_KAFKA_BROKERS": "kafka:9092",
		"RELAY_KAFKA_TOPICS":  "orders",
		"RELAY_MYSQL_DSN":     "relay:relay@tcp(mysql:3306)/relay",
		"RELAY_HTTP_ADDR":     ":8080",
	}
	for k, v := range want {
		if got := relay.Environment[k]; got != v {
			t.Errorf("relay service: %s=%q, want %q", k, got, v)
		}
	}
	if relay.Build == nil {
		t.Error("relay service is not built from the Dockerfile")
	}
	if relay.Restart != "unless-stopped" {
		t.Errorf("relay restart policy %q, want unless-stopped", relay.Restart)
	}
	if c := condition(relay, "mysql"); c != "service_healthy" {
		t.Errorf("relay depends on mysql with condition %q, want service_healthy", c)
	}
	if c := condition(relay, "kafka-init"); c != "service_completed_successfully" {
		t.Errorf("relay depends on kafka-init with condition %q, want service_completed_successfully (the topic must exist)", c)
	}
	kafka := svcs["kafka"].Environment
	for _, k := range []string{"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"} {
		if kafka[k] != "1" {
			t.Errorf("kafka %s=%q: a single broker needs 1, or transactions never complete", k, kafka[k])
		}
	}
	lg := svcs["loadgen"]
	if lg.Image != relay.Image || lg.Image == "" {
		t.Errorf("loadgen image %q, want relay's image %q", lg.Image, relay.Image)
	}
	if !contains(lg.Profiles, "load") {
		t.Errorf("loadgen profiles %v, want [load]", lg.Profiles)
	}
	// Bind mounts name files in this repository: each must exist.
	for name, s := range svcs {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") {
				continue // named volume
			}
			if _, err := os.Stat(filepath.Join("..", src)); err != nil {
				t.Errorf("service %s mounts %s, which does not exist: %v", name, src, err)
			}
		}
	}
	mounts := func(svc, target string) string {
		for _, v := range svcs[svc].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == target {
				return parts[0]
			}
		}
		return ""
	}
	if src := mounts("prometheus", "/etc/prometheus/alerts.yml"); filepath.Clean(src) != filepath.Join("deploy", alertsFile) {
		t.Errorf("prometheus mounts %q at /etc/prometheus/alerts.yml, want ./deploy/%s", src, alertsFile)
	}
	if src := mounts("mysql", "/docker-entrypoint-initdb.d/init.sql"); src == "" {
		t.Error("mysql does not mount deploy/mysql/init.sql into /docker-entrypoint-initdb.d")
	} else {
		sqlText, err := os.ReadFile(filepath.Join("..", src))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(sqlText, []byte("XA_RECOVER_ADMIN ON *.*")) {
			t.Errorf("%s does not grant XA_RECOVER_ADMIN", src)
		}
		// The sink database's privileges are the ones the README tells users to grant, no more.
		granted := regexp.MustCompile(`GRANT ([A-Z, ]+) ON relay\.\*`).FindSubmatch(sqlText)
		readme, err := os.ReadFile(filepath.Join("..", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		told := regexp.MustCompile(`on the sink database, ([A-Z,\s]+(?:\sand\s[A-Z]+)?),\s+plus`).FindSubmatch(readme)
		privs := func(b []byte) []string {
			out := strings.FieldsFunc(string(b), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
			out = slices.DeleteFunc(out, func(w string) bool { return w == "and" })
			slices.Sort(out)
			return out
		}
		if granted == nil || told == nil || !slices.Equal(privs(granted[1]), privs(told[1])) {
			t.Errorf("%s grants %q on relay.*, the README says %q", src, granted, told)
		}
	}
}

// condition is the depends_on condition of s on dep ("" when s does not depend on it with one).
func condition(s composeService, dep string) string {
	m, _ := s.DependsOn.(map[string]any)
	d, _ := m[dep].(map[string]any)
	c, _ := d["condition"].(string)
	return c
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Prometheus loads the rule file the compose stack mounts and scrapes relay with the label
// app="relay", the scrape label the alert rules match (RelayDown's up{app="relay"}).
func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, promConfigFile, &cfg, false)
	if !contains(cfg.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("rule_files %v do not load /etc/prometheus/alerts.yml", cfg.RuleFiles)
	}
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if contains(st.Targets, "relay:8080") && st.Labels["app"] == "relay" {
				found = true
			}
		}
	}
	if !found {
		t.Error(`no scrape config with target relay:8080 labelled app="relay"`)
	}
}

// promtool runs Prometheus's own checker (Debian's prometheus package; scripts/test.sh installs it).
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("RELAY_TEST_REQUIRE") == "1" {
			t.Fatal("promtool is not installed (apt-get install -y prometheus); RELAY_TEST_REQUIRE=1 forbids skipping")
		}
		t.Skip("promtool not installed")
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Prometheus itself accepts the rules and the compose configuration, and the rule unit tests pass:
// each alert fires on the series it is for, with the labels and texts an operator gets, and stays
// quiet on healthy ones.
func TestPromtool(t *testing.T) {
	promtool(t, "check", "rules", alertsFile)
	promtool(t, "test", "rules", alertsTestFile)
	// --syntax-only: the rule file it names is a path inside the container.
	promtool(t, "check", "config", "--syntax-only", promConfigFile)
}

// Every alert has a rule unit test in which it fires and one in which it stays quiet.
func TestAlertRuleTestsCoverEveryAlert(t *testing.T) {
	var doc struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, alertsTestFile, &doc, false)
	if !reflect.DeepEqual(doc.RuleFiles, []string{filepath.Base(alertsFile)}) {
		t.Fatalf("%s tests rule files %v, want [%s]", alertsTestFile, doc.RuleFiles, filepath.Base(alertsFile))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range doc.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	names := map[string]bool{}
	for _, r := range loadAlerts(t) {
		names[r.Alert] = true
		if !fires[r.Alert] {
			t.Errorf("%s: no case where %s fires", alertsTestFile, r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no case where %s stays quiet", alertsTestFile, r.Alert)
		}
	}
	for n := range fires {
		if !names[n] {
			t.Errorf("%s tests %s, which %s does not define", alertsTestFile, n, alertsFile)
		}
	}
}

// --- exported series --------------------------------------------------------------------------

// exported returns every series name relay can export, with its label names. Vectors get one child
// each (a vector without children exports nothing); histograms expand to _bucket, _sum, _count.
func exported(t *testing.T) map[string]map[string]bool {
	t.Helper()
	m := metrics.New("x")
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m.WatchPool("x", "sink", db)
	touchVectors(t, m)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	add := func(name string, labels map[string]bool) {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for l := range labels {
			out[name][l] = true
		}
	}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		name := mf.GetName()
		switch mf.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			withLE := map[string]bool{"le": true}
			for l := range labels {
				withLE[l] = true
			}
			add(name+"_bucket", withLE)
			add(name+"_sum", labels)
			add(name+"_count", labels)
		case "SUMMARY":
			withQ := map[string]bool{"quantile": true}
			for l := range labels {
				withQ[l] = true
			}
			add(name, withQ)
			add(name+"_sum", labels)
			add(name+"_count", labels)
		default:
			add(name, labels)
		}
	}
	return out
}

// touchVectors creates one child in every metric vector of m, whatever its label count.
func touchVectors(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		get := f.MethodByName("GetMetricWithLabelValues")
		if !get.IsValid() || f.IsNil() {
			continue
		}
		made := false
		for n := 0; n <= 8 && !made; n++ {
			args := make([]reflect.Value, n)
			for j := range args {
				args[j] = reflect.ValueOf("x")
			}
			res := get.Call(args)
			made = res[1].IsNil()
		}
		if !made {
			t.Fatalf("could not create a child of metric vector %s", v.Type().Field(i).Name)
		}
	}
}

// scrapeLabels are attached by Prometheus, not by relay. Of them only app means the same in every
// setup (the job is "relay" in compose, the scrape job's name in Kubernetes).
var scrapeLabels = map[string]bool{"job": true, "instance": true, "app": true, "__name__": true}

// checkRefs fails for each metric an expression names that relay does not export, and for each
// label matcher on a label the metric does not have.
func checkRefs(t *testing.T, where, expr string, names map[string]map[string]bool) int {
	t.Helper()
	refs, err := metricRefs(expr)
	if err != nil {
		t.Errorf("%s: %v in %q", where, err, expr)
		return 0
	}
	for _, r := range refs {
		if r.metric == "up" {
			if !reflect.DeepEqual(r.labels, []string{"app"}) {
				t.Errorf(`%s: up must be selected by app="relay" alone, the label every scrape setup gives relay (expr %q)`, where, expr)
			}
			continue
		}
		labels, ok := names[r.metric]
		if !ok {
			t.Errorf("%s: metric %s is not exported by relay (expr %q)", where, r.metric, expr)
			continue
		}
		for _, l := range r.labels {
			if !labels[l] && !scrapeLabels[l] {
				t.Errorf("%s: metric %s has no label %q (expr %q)", where, r.metric, l, expr)
			}
		}
	}
	return len(refs)
}

func TestDashboardAndAlertMetricsExist(t *testing.T) {
	names := exported(t)
	if _, ok := names["relay_checkpoint_phase_duration_seconds_bucket"]; !ok {
		t.Fatalf("histogram expansion missing from the exported set: %v", keys(names))
	}
	d := loadDashboard(t)
	used := map[string]bool{}
	refs := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			refs += checkRefs(t, fmt.Sprintf("dashboard panel %d %q", p.ID, p.Title), tg.Expr, names)
			rs, _ := metricRefs(tg.Expr)
			for _, r := range rs {
				used[r.metric] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		if q := v.queryText(); q != "" {
			refs += checkRefs(t, "dashboard variable "+v.Name, q, names)
		}
	}
	for _, r := range loadAlerts(t) {
		refs += checkRefs(t, "alert "+r.Alert, r.Expr, names)
	}
	if refs < 20 {
		t.Fatalf("only %d metric references found in the dashboard and the alerts: the expression scanner is broken", refs)
	}
	// Every relay family has a panel: a new metric nobody can see is a metric nobody watches.
	for name := range names {
		if !strings.HasPrefix(name, "relay_") || name == "relay_build_info" {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !used[name] && !used[base+"_bucket"] && !used[base] {
			t.Errorf("metric %s appears on no dashboard panel (%s)", name, dashboardFile)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// --- PromQL scanning ------------------------------------------------------------------------------

type ref struct {
	metric string
	labels []string // label names matched in the selector's braces
}

var (
	// Keywords that may stand where an identifier does, and aggregations (which may be followed by
	// `by (...)` instead of a parenthesis).
	promKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true, "atan2": true,
	}
	// Keywords followed by a parenthesised list of label names.
	labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true}
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// metricRefs lists the metric names an expression selects (PromQL, with Grafana $variables):
// identifiers that are not functions, keywords, label names, strings, numbers or durations.
func metricRefs(expr string) ([]ref, error) {
	var out []ref
	n := len(expr)
	skipSpace := func(i int) int {
		for i < n && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n' || expr[i] == '\r') {
			i++
		}
		return i
	}
	skipString := func(i int) (int, error) {
		q := expr[i]
		for j := i + 1; j < n; j++ {
			if expr[j] == '\\' && q != '`' {
				j++
				continue
			}
			if expr[j] == q {
				return j + 1, nil
			}
		}
		return n, fmt.Errorf("unterminated string at %d", i)
	}
	// skipUntil returns the index after the matching close byte (no nesting of the same kind).
	skipUntil := func(i int, close byte) (int, []string, error) {
		var idents []string
		for j := i + 1; j < n; {
			switch c := expr[j]; {
			case c == close:
				return j + 1, idents, nil
			case c == '"' || c == '\'' || c == '`':
				var err error
				if j, err = skipString(j); err != nil {
					return n, nil, err
				}
			case isIdentStart(c):
				k := j
				for k < n && isIdent(expr[k]) {
					k++
				}
				idents = append(idents, expr[j:k])
				j = k
			default:
				j++
			}
		}
		return n, nil, fmt.Errorf("missing %q after %d", close, i)
	}
	for i := 0; i < n; {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '#':
			for i < n && expr[i] != '\n' {
				i++
			}
		case c == '[':
			j, _, err := skipUntil(i, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			// A selector without a metric name, e.g. {__name__="..."}: no name to check.
			j, _, err := skipUntil(i, '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			if i < n && expr[i] == '{' {
				j, _, err := skipUntil(i, '}')
				if err != nil {
					return nil, err
				}
				i = j
				continue
			}
			for i < n && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < n && expr[i+1] >= '0' && expr[i+1] <= '9':
			for i < n && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < n && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := skipSpace(j)
			switch {
			case labelListKeywords[strings.ToLower(word)]:
				if k < n && expr[k] == '(' {
					end, _, err := skipUntil(k, ')')
					if err != nil {
						return nil, err
					}
					j = end
				}
			case promKeywords[strings.ToLower(word)]:
			case k < n && expr[k] == '(':
				// a function call
			default:
				r := ref{metric: word}
				if k < n && expr[k] == '{' {
					end, idents, err := skipUntil(k, '}')
					if err != nil {
						return nil, err
					}
					// Inside braces every identifier outside a string is a label name.
					r.labels = idents
					j = end
				}
				out = append(out, r)
			}
			i = j
		default:
			i++
		}
	}
	return out, nil
}

// The scanner is what the metric check stands on: it must find metrics and nothing else.
func TestMetricRefsScanner(t *testing.T) {
	cases := []struct {
		expr string
		want string // metric{labels} ...
	}{
		{`relay_ready == 0`, `relay_ready`},
		{`up{job="relay"} == 0`, `up{job}`},
		{`sum by (result) (rate(relay_records_total{relay_job=~"$relay_job"}[$__rate_interval]))`, `relay_records_total{relay_job}`},
		{`histogram_quantile(0.99, sum by (le, phase) (rate(relay_checkpoint_phase_duration_seconds_bucket[5m])))`, `relay_checkpoint_phase_duration_seconds_bucket`},
		{`(time() - a_ts > 120) and a_ts > 0`, `a_ts a_ts`},
		{`increase(x_total{result="failed", origin!~"a|b"}[5m]) > 0`, `x_total{result,origin}`},
		{`sum without (instance) (a) / on(relay_job) group_left(pool) b offset 5m`, `a b`},
		{`max_over_time(g[10m:1m]) > bool 1e3 unless h`, `g h`},
		{`count(x{l="{not a label}"}) # trailing comment mentions fake_metric`, `x{l}`},
	}
	for _, tc := range cases {
		refs, err := metricRefs(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		var got []string
		for _, r := range refs {
			s := r.metric
			if len(r.labels) > 0 {
				s += "{" + strings.Join(r.labels, ",") + "}"
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%q: got %q, want %q", tc.expr, g, tc.want)
		}
	}
	if _, err := metricRefs(`rate(x[5m)`); err == nil {
		t.Error("an unterminated range was accepted")
	}
}

// --- dashboard ------------------------------------------------------------------------------------

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Panels        []struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource *datasourceRef `json:"datasource"`
		GridPos    *struct {
			X int `json:"x"`
			Y int `json:"y"`
			W int `json:"w"`
			H int `json:"h"`
		} `json:"gridPos"`
		Targets []struct {
			RefID      string         `json:"refId"`
			Expr       string         `json:"expr"`
			Datasource *datasourceRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
}

type templateVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *datasourceRef  `json:"datasource"`
	Query      json.RawMessage `json:"query"`
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// queryText is a query variable's PromQL (Grafana stores it as a string or as {"query": ...});
// for label_values(selector, label) it is the selector, the label being no metric.
func (v templateVar) queryText() string {
	if v.Type != "query" {
		return ""
	}
	var s string
	if json.Unmarshal(v.Query, &s) != nil {
		var o struct {
			Query string `json:"query"`
		}
		_ = json.Unmarshal(v.Query, &o)
		s = o.Query
	}
	if m := labelValuesRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return s
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// provisionedUID is the uid of the Prometheus datasource Grafana is provisioned with.
func provisionedUID(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(datasourceDir, "*.yml"))
	var uids []string
	for _, f := range files {
		var doc struct {
			Datasources []struct {
				UID  string `yaml:"uid"`
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		readYAML(t, f, &doc, false)
		for _, ds := range doc.Datasources {
			if ds.Type == "prometheus" {
				uids = append(uids, ds.UID)
				if ds.URL != "http://prometheus:9090" {
					t.Errorf("%s: prometheus datasource url %q, want the compose service http://prometheus:9090", f, ds.URL)
				}
			}
		}
	}
	if len(uids) != 1 || uids[0] == "" {
		t.Fatalf("want exactly one provisioned prometheus datasource with a uid under %s, found %q", datasourceDir, uids)
	}
	return uids[0]
}

var varRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	uid := provisionedUID(t)
	if d.Title == "" {
		t.Error("dashboard has no title")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`).MatchString(d.UID) {
		t.Errorf("dashboard uid %q: want 1-40 of [A-Za-z0-9_-] (stable links depend on it)", d.UID)
	}
	if d.SchemaVersion != 39 {
		t.Errorf("schemaVersion %d, want 39", d.SchemaVersion)
	}
	if len(d.Panels) < 10 {
		t.Fatalf("%d panels; the dashboard is missing most of relay's metrics", len(d.Panels))
	}
	checkDS := func(where string, ds *datasourceRef) {
		if ds == nil {
			t.Errorf("%s has no datasource", where)
		} else if ds.Type != "prometheus" || ds.UID != uid {
			t.Errorf("%s uses datasource %+v, want {prometheus %s} as provisioned", where, *ds, uid)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" {
			checkDS("variable "+v.Name, v.Datasource)
		}
	}
	ids := map[int]bool{}
	type rect struct{ x, y, w, h int }
	var placed []rect
	types := map[string]bool{"timeseries": true, "stat": true}
	for i, p := range d.Panels {
		where := fmt.Sprintf("panel #%d (id %d, %q)", i, p.ID, p.Title)
		if p.ID <= 0 || ids[p.ID] {
			t.Errorf("%s: id must be positive and unique", where)
		}
		ids[p.ID] = true
		if !types[p.Type] {
			t.Errorf("%s: type %q, want timeseries or stat", where, p.Type)
		}
		if strings.TrimSpace(p.Title) == "" {
			t.Errorf("%s: no title", where)
		}
		if g := p.GridPos; g == nil {
			t.Errorf("%s: no gridPos", where)
		} else {
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				t.Errorf("%s: gridPos %+v outside the 24-column grid", where, *g)
			}
			r := rect{g.X, g.Y, g.W, g.H}
			for _, o := range placed {
				if r.x < o.x+o.w && o.x < r.x+r.w && r.y < o.y+o.h && o.y < r.y+r.h {
					t.Errorf("%s: gridPos %+v overlaps another panel at %+v", where, *g, o)
				}
			}
			placed = append(placed, r)
		}
		checkDS(where, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", where)
		}
		refs := map[string]bool{}
		for j, tg := range p.Targets {
			tw := fmt.Sprintf("%s target %d", where, j)
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q empty or repeated", tw, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: empty expr", tw)
			}
			if tg.Datasource != nil {
				checkDS(tw, tg.Datasource)
			}
			for _, m := range varRE.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.HasPrefix(m[1], "__") && !vars[m[1]] {
					t.Errorf("%s: uses $%s, which is no dashboard variable", tw, m[1])
				}
			}
		}
	}
}

// --- alerts ---------------------------------------------------------------------------------------

type alertRule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	var doc struct {
		Groups []struct {
			Name        string            `yaml:"name"`
			Interval    string            `yaml:"interval"`
			Limit       int               `yaml:"limit"`
			QueryOffset string            `yaml:"query_offset"`
			Labels      map[string]string `yaml:"labels"`
			Rules       []alertRule       `yaml:"rules"`
		} `yaml:"groups"`
	}
	// Unknown fields are errors: "annotation:" instead of "annotations:" would otherwise vanish.
	readYAML(t, alertsFile, &doc, true)
	var out []alertRule
	for _, g := range doc.Groups {
		if g.Name == "" {
			t.Errorf("%s: a group has no name", alertsFile)
		}
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no rules", alertsFile)
	}
	return out
}

// runbookAnchors are the GitHub anchors of the runbook's headings.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[slug(title)] = true
	}
	return out
}

// slug is GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens.
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestAlertRules(t *testing.T) {
	anchors := runbookAnchors(t)
	if !anchors["hanging-transactions-in-doubt-branches"] {
		t.Fatalf("runbook anchors look wrong (slug function or headings): %v", keys(anchors))
	}
	seen := map[string]bool{}
	for i, r := range loadAlerts(t) {
		where := fmt.Sprintf("rule #%d %q", i, r.Alert)
		if r.Alert == "" {
			t.Errorf("%s: no alert name (recording rules belong elsewhere)", where)
		}
		if seen[r.Alert] {
			t.Errorf("%s: alert name repeated", where)
		}
		seen[r.Alert] = true
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: no expr", where)
		}
		if r.For == "" {
			t.Errorf("%s: no for (state it, even as 0m)", where)
		} else if _, err := model.ParseDuration(r.For); err != nil {
			t.Errorf("%s: for %q: %v", where, r.For, err)
		}
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: labels.severity %q, want critical, warning or info", where, r.Labels["severity"])
		}
		if strings.TrimSpace(r.Annotations["summary"]) == "" {
			t.Errorf("%s: no annotations.summary", where)
		}
		if strings.TrimSpace(r.Annotations["description"]) == "" {
			t.Errorf("%s: no annotations.description", where)
		}
		_, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "docs/RUNBOOK.md#")
		if !ok {
			t.Errorf("%s: runbook_url %q does not point into docs/RUNBOOK.md", where, r.Annotations["runbook_url"])
		} else if !anchors[anchor] {
			t.Errorf("%s: runbook_url anchor #%s is no heading of %s", where, anchor, runbookFile)
		}
		if strings.Contains(r.Annotations["description"], "docs/RUNBOOK.md#") &&
			!strings.Contains(r.Annotations["description"], "docs/RUNBOOK.md#"+anchor) {
			t.Errorf("%s: description and runbook_url name different runbook sections", where)
		}
	}
}

// runbookLinkRE finds links to a runbook section: RUNBOOK.md#anchor from any document, (#anchor)
// inside the runbook itself.
var runbookLinkRE = regexp.MustCompile(`RUNBOOK\.md#([a-z0-9_-]+)|\]\(#([a-z0-9_-]+)\)`)

// Every link to a runbook section, from the docs (METRICS.md links each metric to the section that
// explains it), the README, the Grafana dashboard and the runbook's own symptom index, names a
// heading that exists: a renamed heading must break this test, not an operator's search at night.
func TestRunbookLinks(t *testing.T) {
	anchors := runbookAnchors(t)
	docs, _ := filepath.Glob("../docs/*.md")
	files := append(docs, "../README.md", dashboardFile, alertsFile)
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range runbookLinkRE.FindAllStringSubmatch(string(b), -1) {
			anchor := m[1]
			if m[2] != "" {
				if filepath.Base(f) != "RUNBOOK.md" {
					continue // a link to a section of that document, not of the runbook
				}
				anchor = m[2]
			}
			links++
			if !anchors[anchor] {
				t.Errorf("%s links docs/RUNBOOK.md#%s, which is no heading of the runbook", f, anchor)
			}
		}
	}
	if links < 30 {
		t.Fatalf("only %d runbook links found: the link pattern is broken", links)
	}
}

// --- helpers --------------------------------------------------------------------------------------

func readYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
