package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/config"
)

// k8sDoc is what these tests read of a manifest: a Secret's data, a workload's pod template.
type k8sDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
				Volumes                       []struct {
					Name   string `yaml:"name"`
					Secret struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
				Containers []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name string `yaml:"name"`
					} `yaml:"ports"`
					Env []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom struct {
							SecretKeyRef struct {
								Name string `yaml:"name"`
								Key  string `yaml:"key"`
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
					ReadinessProbe struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
					LivenessProbe struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"livenessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// readK8s decodes every document of a manifest file into v's element type.
func readK8s[T any](t *testing.T, path string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc T
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, doc)
	}
}

// checkWorkload checks the one workload of kind in a manifest file the way every relay pod must
// be: probed on /readyz and /healthz, scraped by Prometheus with the label app=relay, given only
// keys relay knows, talking to MySQL over verified TLS, every *_FILE it names a key of a mounted
// secret. It returns the workload and its container's variables (secretKeyRefs resolved).
func checkWorkload(t *testing.T, path, kind string) (k8sDoc, map[string]string) {
	t.Helper()
	known := map[string]bool{}
	for _, f := range config.Fields() {
		known[f.Env] = true
	}
	secrets := map[string]map[string]string{} // name -> stringData
	env := map[string]string{}                // the container's variables, secretKeyRefs resolved below
	refs := map[string][2]string{}            // variable -> secret name, key
	mounts := map[string]string{}             // mount path -> secret name
	var found []k8sDoc
	for _, doc := range readK8s[k8sDoc](t, path) {
		if doc.Kind == "Secret" {
			secrets[doc.Metadata.Name] = doc.StringData
		}
		if doc.Kind == kind {
			found = append(found, doc)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d %ss, want 1", path, len(found), kind)
	}
	doc := found[0]
	tpl := doc.Spec.Template
	if tpl.Metadata.Annotations["prometheus.io/scrape"] != "true" || tpl.Metadata.Annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: scrape annotations: %v", path, tpl.Metadata.Annotations)
	}
	// The scrape job copies pod labels; app="relay" is what the alert rules select targets by.
	if tpl.Metadata.Labels["app"] != "relay" {
		t.Errorf("%s: pod labels %v lack app: relay, which RelayDown's up{app=\"relay\"} matches", path, tpl.Metadata.Labels)
	}
	if len(doc.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("%s: no selector.matchLabels", path)
	}
	for k, v := range doc.Spec.Selector.MatchLabels {
		if tpl.Metadata.Labels[k] != v {
			t.Errorf("%s: selector %s=%s does not match the pod labels %v", path, k, v, tpl.Metadata.Labels)
		}
	}
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", path, len(tpl.Spec.Containers))
	}
	c := tpl.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: probes: readiness %q liveness %q", path, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "RELAY_") && !known[e.Name] {
			t.Errorf("%s: env %s is not a relay configuration key", path, e.Name)
		}
		env[e.Name] = e.Value
		if r := e.ValueFrom.SecretKeyRef; r.Name != "" {
			refs[e.Name] = [2]string{r.Name, r.Key}
		}
	}
	volumes := map[string]string{}
	for _, v := range tpl.Spec.Volumes {
		volumes[v.Name] = v.Secret.SecretName
	}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = volumes[m.Name]
	}
	for name, ref := range refs {
		env[name] = secrets[ref[0]][ref[1]]
	}
	for name, p := range env {
		if !strings.HasSuffix(name, "_FILE") {
			continue
		}
		dir, key := filepath.Split(p)
		secret, mounted := mounts[filepath.Clean(dir)]
		if _, ok := secrets[secret][key]; !mounted || !ok {
			t.Errorf("%s: %s=%s is not a key of a mounted secret", path, name, p)
		}
	}
	// tls=preferred or skip-verify would hand the password to whoever answers on the path; a CA
	// file overrides the DSN's tls parameter.
	dsn := env["RELAY_MYSQL_DSN"]
	if env["RELAY_MYSQL_TLS_CA_FILE"] == "" && !strings.Contains(dsn, "tls=true") {
		t.Errorf("%s: RELAY_MYSQL_DSN %q: MySQL TLS is not verified (want tls=true or RELAY_MYSQL_TLS_CA_FILE)", path, dsn)
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		t.Errorf("%s: RELAY_MYSQL_DSN %q: %v", path, dsn, err)
	}
	return doc, env
}

// podConfig is the configuration a workload's pods run with (pod 0's: $(POD_INDEX) is 0; files
// left out: they exist only in the pod), as relay loads and validates it.
func podConfig(t *testing.T, path string, env map[string]string) config.Config {
	t.Helper()
	var environ []string
	for k, v := range env {
		if !strings.HasSuffix(k, "_FILE") {
			environ = append(environ, k+"="+strings.ReplaceAll(v, "$(POD_INDEX)", "0"))
		}
	}
	cfg, err := config.Load("", environ)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("%s: relay refuses the pods' configuration: %v", path, err)
	}
	return cfg
}

// checkGrace checks that a workload gives a stopping pod the longest drain its configuration
// allows (config's DrainBound, which also bounds a member's revoke) before Kubernetes kills it: a
// pod killed mid-drain leaves its checkpoint to recovery, and a member its partitions to the
// group's session timeout.
func checkGrace(t *testing.T, path string, doc k8sDoc, cfg config.Config) {
	t.Helper()
	bound := cfg.Checkpoint.DrainBound()
	grace := doc.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second < bound {
		g := "unset (30 s)"
		if grace != nil {
			g = strconv.Itoa(*grace) + " s"
		}
		t.Errorf("%s: terminationGracePeriodSeconds %s is below the drain bound %s (checkpoint.timeout %s, restart_allowance %s)",
			path, g, bound, cfg.Checkpoint.Timeout, cfg.Checkpoint.RestartAllowance)
	}
}

// The StatefulSet example maps the pod ordinal to RELAY_INSTANCE with the replica count as M, and
// gives a stopping pod its drain.
func TestK8sStatefulSet(t *testing.T) {
	const path = "k8s/relay.yaml"
	doc, env := checkWorkload(t, path, "StatefulSet")
	checkGrace(t, path, doc, podConfig(t, path, env))
	instance := env["RELAY_INSTANCE"]
	if doc.Spec.Replicas == nil {
		t.Fatal("the StatefulSet sets no replicas, which RELAY_INSTANCE's M must equal")
	}
	if want := "$(POD_INDEX)/" + strconv.Itoa(*doc.Spec.Replicas); instance != want {
		t.Errorf("RELAY_INSTANCE = %q, want %q (the ordinal of replicas)", instance, want)
	}
	if _, _, err := config.ParseInstance(strings.Replace(instance, "$(POD_INDEX)", "0", 1)); err != nil {
		t.Errorf("RELAY_INSTANCE for pod 0: %v", err)
	}
}

// groupDeployment checks the group example's Deployment and returns it with the configuration its
// pods run with (files left out: they exist only in the pod).
func groupDeployment(t *testing.T) (k8sDoc, config.Config) {
	t.Helper()
	const path = "k8s/relay-group.yaml"
	doc, env := checkWorkload(t, path, "Deployment")
	// The group assigns partitions: a fixed share or a replica count the autoscaler would fight
	// would each undo it.
	for _, name := range []string{"RELAY_INSTANCE", "POD_INDEX"} {
		if _, ok := env[name]; ok {
			t.Errorf("%s sets %s: group members take what the group assigns, not a share by pod name", path, name)
		}
	}
	if doc.Spec.Replicas != nil {
		t.Errorf("%s sets replicas: %d; the autoscaler owns it (re-applying the file would reset it)", path, *doc.Spec.Replicas)
	}
	cfg := podConfig(t, path, env)
	if !cfg.Group() || cfg.Subtasks != 1 {
		t.Errorf("%s: membership %q, subtasks %d; want group and 1", path, cfg.Membership, cfg.Subtasks)
	}
	// KEDA reads the lag from the group's committed offsets, which only this publishes.
	if env["RELAY_KAFKA_COMMIT_GROUP_OFFSETS"] != "true" || !cfg.Kafka.CommitGroupOffsets {
		t.Errorf("%s: RELAY_KAFKA_COMMIT_GROUP_OFFSETS=%q, want \"true\" (the autoscaler reads the group's offsets)", path, env["RELAY_KAFKA_COMMIT_GROUP_OFFSETS"])
	}
	return doc, cfg
}

// The group example runs as a Deployment of members of the consumer group relay-<job>, with the
// same probes, secrets, TLS and scrape setup as the StatefulSet, and gives a stopping pod its
// drain.
func TestK8sGroupDeployment(t *testing.T) {
	doc, cfg := groupDeployment(t)
	checkGrace(t, "k8s/relay-group.yaml", doc, cfg)
	if cfg.Kafka.GroupID != "relay-"+cfg.Job.Name {
		t.Errorf("group id %q, want relay's default relay-%s (the autoscalers name it)", cfg.Kafka.GroupID, cfg.Job.Name)
	}
}

// scaleTarget is an autoscaler's reference to what it scales.
type scaleTarget struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Name       string `yaml:"name"`
}

// scaledObject is what the test reads of a KEDA ScaledObject.
type scaledObject struct {
	Kind string `yaml:"kind"`
	Spec struct {
		ScaleTargetRef  scaleTarget `yaml:"scaleTargetRef"`
		MinReplicaCount *int        `yaml:"minReplicaCount"`
		MaxReplicaCount *int        `yaml:"maxReplicaCount"`
		Triggers        []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

// hpa is what the test reads of an autoscaling/v2 HorizontalPodAutoscaler.
type hpa struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Spec       struct {
		ScaleTargetRef scaleTarget `yaml:"scaleTargetRef"`
		MinReplicas    *int        `yaml:"minReplicas"`
		MaxReplicas    int         `yaml:"maxReplicas"`
		Metrics        []struct {
			Type     string `yaml:"type"`
			External struct {
				Metric struct {
					Name     string `yaml:"name"`
					Selector struct {
						MatchLabels map[string]string `yaml:"matchLabels"`
					} `yaml:"selector"`
				} `yaml:"metric"`
				Target struct {
					Type         string `yaml:"type"`
					AverageValue string `yaml:"averageValue"`
				} `yaml:"target"`
			} `yaml:"external"`
		} `yaml:"metrics"`
	} `yaml:"spec"`
}

// adapterTemplates are the Go template fields of a Prometheus adapter query, replaced by what the
// adapter puts there so the query can be scanned as PromQL.
var adapterTemplates = regexp.MustCompile(`<<\.(Series|LabelMatchers|GroupBy)>>`)

// Both autoscalers scale the group Deployment on its lag, from one member up to the partition
// count (the same cap in both): KEDA reads the consumer group relay's members commit to, the HPA
// relay's lag series through the Prometheus adapter rule, which names only series relay exports.
func TestK8sGroupAutoscalers(t *testing.T) {
	dep, cfg := groupDeployment(t)
	if len(cfg.Kafka.Topics) != 1 {
		t.Fatalf("the group example reads %v; the ScaledObject names one topic", cfg.Kafka.Topics)
	}
	checkTarget := func(file string, ref scaleTarget) {
		if ref.Name != dep.Metadata.Name || (ref.Kind != "" && ref.Kind != "Deployment") ||
			(ref.APIVersion != "" && ref.APIVersion != "apps/v1") {
			t.Errorf("%s scales %+v, want the Deployment %s", file, ref, dep.Metadata.Name)
		}
	}

	const kedaFile = "k8s/relay-group-keda.yaml"
	sos := slices.DeleteFunc(readK8s[scaledObject](t, kedaFile), func(d scaledObject) bool { return d.Kind != "ScaledObject" })
	if len(sos) != 1 {
		t.Fatalf("%s: want one ScaledObject", kedaFile)
	}
	so := sos[0].Spec
	checkTarget(kedaFile, so.ScaleTargetRef)
	if so.MinReplicaCount == nil || *so.MinReplicaCount < 1 || so.MaxReplicaCount == nil {
		t.Fatalf("%s: minReplicaCount %v, maxReplicaCount %v; want at least 1 (no member reads nothing, and RelayDown fires), and a cap", kedaFile, so.MinReplicaCount, so.MaxReplicaCount)
	}
	if len(so.Triggers) != 1 || so.Triggers[0].Type != "kafka" {
		t.Fatalf("%s: want one kafka trigger", kedaFile)
	}
	md := so.Triggers[0].Metadata
	want := map[string]string{
		"consumerGroup":    cfg.Kafka.GroupID,
		"topic":            cfg.Kafka.Topics[0],
		"bootstrapServers": cfg.Kafka.Brokers.String(),
	}
	for k, v := range want {
		if md[k] != v {
			t.Errorf("%s: trigger %s=%q, want %q as relay-group.yaml's pods use", kedaFile, k, md[k], v)
		}
	}
	if lag, err := strconv.Atoi(md["lagThreshold"]); err != nil || lag <= 0 {
		t.Errorf("%s: lagThreshold %q, want a positive number", kedaFile, md["lagThreshold"])
	}
	if md["allowIdleConsumers"] == "true" {
		t.Errorf("%s: allowIdleConsumers true scales past the partition count, where members get nothing", kedaFile)
	}

	const hpaFile = "k8s/relay-group-hpa.yaml"
	hs := readK8s[hpa](t, hpaFile)
	if len(hs) != 1 || hs[0].Kind != "HorizontalPodAutoscaler" || hs[0].APIVersion != "autoscaling/v2" {
		t.Fatalf("%s: want one autoscaling/v2 HorizontalPodAutoscaler", hpaFile)
	}
	h := hs[0].Spec
	checkTarget(hpaFile, h.ScaleTargetRef)
	if h.MinReplicas == nil || *h.MinReplicas < 1 {
		t.Errorf("%s: minReplicas %v, want at least 1", hpaFile, h.MinReplicas)
	}
	if h.MaxReplicas != *so.MaxReplicaCount {
		t.Errorf("%s: maxReplicas %d, %s: maxReplicaCount %d; both are the topic's partition count", hpaFile, h.MaxReplicas, kedaFile, *so.MaxReplicaCount)
	}
	if len(h.Metrics) != 1 || h.Metrics[0].Type != "External" {
		t.Fatalf("%s: want one External metric", hpaFile)
	}
	ext := h.Metrics[0].External
	if sel := ext.Metric.Selector.MatchLabels; len(sel) != 1 || sel["relay_job"] != cfg.Job.Name {
		t.Errorf("%s: metric selector %v, want relay_job: %s alone", hpaFile, sel, cfg.Job.Name)
	}
	if ext.Target.Type != "AverageValue" || ext.Target.AverageValue == "" {
		t.Errorf("%s: target %+v, want an AverageValue (lag per member)", hpaFile, ext.Target)
	}

	const adapterFile = "k8s/prometheus-adapter.yml"
	var adapter struct {
		ExternalRules []struct {
			SeriesQuery string `yaml:"seriesQuery"`
			Resources   struct {
				Overrides map[string]struct {
					Resource string `yaml:"resource"`
				} `yaml:"overrides"`
			} `yaml:"resources"`
			Name struct {
				Matches string `yaml:"matches"`
				As      string `yaml:"as"`
			} `yaml:"name"`
			MetricsQuery string `yaml:"metricsQuery"`
		} `yaml:"externalRules"`
	}
	readYAML(t, adapterFile, &adapter, true)
	names := exported(t)
	// The Kubernetes scrape job adds labels of its own (namespace, pod) to every series.
	for _, l := range k8sScrapeTargetLabels(t) {
		for _, labels := range names {
			labels[l] = true
		}
	}
	served := false
	for i, r := range adapter.ExternalRules {
		where := fmt.Sprintf("%s external rule %d", adapterFile, i)
		checkRefs(t, where+" seriesQuery", r.SeriesQuery, names)
		series, err := metricRefs(r.SeriesQuery)
		if err != nil || len(series) != 1 {
			t.Errorf("%s: seriesQuery %q must select one metric by name", where, r.SeriesQuery)
			continue
		}
		if !regexp.MustCompile(r.Name.Matches).MatchString(series[0].metric) {
			t.Errorf("%s: name.matches %q does not match %s", where, r.Name.Matches, series[0].metric)
		}
		q := adapterTemplates.ReplaceAllStringFunc(r.MetricsQuery, func(m string) string {
			if m == "<<.Series>>" {
				return series[0].metric
			}
			return "" // the label matchers and grouping the adapter adds are the HPA's
		})
		if strings.Contains(q, "<<") {
			t.Errorf("%s: metricsQuery %q uses a template field the test does not know", where, r.MetricsQuery)
		}
		checkRefs(t, where+" metricsQuery", q, names)
		if r.Resources.Overrides["namespace"].Resource != "namespace" {
			t.Errorf("%s: the namespace label must map to the HPA's namespace (resources.overrides.namespace)", where)
		}
		served = served || r.Name.As == ext.Metric.Name
	}
	if !served {
		t.Errorf("%s serves no external metric named %q, which %s scales on", adapterFile, ext.Metric.Name, hpaFile)
	}
}

// k8sScrapeTargetLabels are the labels prometheus-scrape.yml's relabelling writes onto relay's series.
func k8sScrapeTargetLabels(t *testing.T) []string {
	t.Helper()
	var cfg struct {
		ScrapeConfigs []struct {
			RelabelConfigs []struct {
				TargetLabel string `yaml:"target_label"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "k8s/prometheus-scrape.yml", &cfg, false)
	var out []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, rc := range sc.RelabelConfigs {
			if rc.TargetLabel != "" && !strings.HasPrefix(rc.TargetLabel, "__") {
				out = append(out, rc.TargetLabel)
			}
		}
	}
	return out
}

// The scrape job shipped for the pod annotations keeps only annotated pods and copies the pod
// labels onto the series, so relay's targets carry app="relay" as in docker-compose. (Debian's
// promtool is built without Kubernetes discovery, so it cannot check this file.)
func TestK8sScrapeConfig(t *testing.T) {
	var cfg struct {
		ScrapeConfigs []struct {
			JobName             string `yaml:"job_name"`
			KubernetesSDConfigs []struct {
				Role string `yaml:"role"`
			} `yaml:"kubernetes_sd_configs"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Action       string   `yaml:"action"`
				Regex        string   `yaml:"regex"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "k8s/prometheus-scrape.yml", &cfg, false)
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape configs, want 1", len(cfg.ScrapeConfigs))
	}
	sc := cfg.ScrapeConfigs[0]
	if len(sc.KubernetesSDConfigs) != 1 || sc.KubernetesSDConfigs[0].Role != "pod" {
		t.Errorf("kubernetes_sd_configs %+v, want role pod", sc.KubernetesSDConfigs)
	}
	keep, labelmap := false, false
	for _, rc := range sc.RelabelConfigs {
		keep = keep || (rc.Action == "keep" && rc.Regex == "true" &&
			strings.Join(rc.SourceLabels, ",") == "__meta_kubernetes_pod_annotation_prometheus_io_scrape")
		labelmap = labelmap || (rc.Action == "labelmap" && rc.Regex == "__meta_kubernetes_pod_label_(.+)")
	}
	if !keep || !labelmap {
		t.Errorf("relabel_configs: keep on prometheus.io/scrape %v, labelmap of pod labels %v; want both", keep, labelmap)
	}
}

// podSetup is what a pod template gives its one container: variables (as written) and the secret
// mounted at each path.
func podSetup(t *testing.T, path string, doc k8sDoc) (env map[string]string, mounts map[string]string) {
	t.Helper()
	tpl := doc.Spec.Template.Spec
	if len(tpl.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", path, len(tpl.Containers))
	}
	env, mounts = map[string]string{}, map[string]string{}
	for _, e := range tpl.Containers[0].Env {
		env[e.Name] = e.Value
	}
	volumes := map[string]string{}
	for _, v := range tpl.Volumes {
		volumes[v.Name] = v.Secret.SecretName
	}
	for _, m := range tpl.Containers[0].VolumeMounts {
		mounts[m.MountPath] = volumes[m.Name]
	}
	return env, mounts
}

// The operator Job runs a relay command with exactly the group pods' configuration (so it acts on
// their job and the layout they run), and its pod is no relay pod to the Service, the
// PodDisruptionBudget or the scrape job.
func TestK8sOpsJob(t *testing.T) {
	const path = "k8s/relay-ops-job.yaml"
	dep, _ := groupDeployment(t)
	var jobs []k8sDoc
	for _, doc := range readK8s[k8sDoc](t, path) {
		if doc.Kind == "Job" {
			jobs = append(jobs, doc)
		}
	}
	if len(jobs) != 1 {
		t.Fatalf("%s: %d Jobs, want 1", path, len(jobs))
	}
	job := jobs[0]
	jobEnv, jobMounts := podSetup(t, path, job)
	depEnv, depMounts := podSetup(t, "k8s/relay-group.yaml", dep)
	if !maps.Equal(jobEnv, depEnv) {
		t.Errorf("%s: env %v\nrelay-group.yaml's pods: %v\nthe command must run with the pods' configuration", path, jobEnv, depEnv)
	}
	if !maps.Equal(jobMounts, depMounts) {
		t.Errorf("%s: secret mounts %v, relay-group.yaml's pods %v", path, jobMounts, depMounts)
	}
	if args := job.Spec.Template.Spec.Containers[0].Args; len(args) < 2 || args[0] != "membership" || args[len(args)-1] != "--yes" {
		t.Errorf("%s: args %q, want relay membership switch --yes (the documented use)", path, args)
	}
	if l := job.Spec.Template.Metadata.Labels["app"]; l == "relay" || l == "" {
		t.Errorf("%s: pod label app=%q; the Service, PodDisruptionBudget and scrape job select app=relay", path, l)
	}
}

// k8sExtra is what the tests read of the documents around the workloads: a Service, a
// ServiceMonitor, a PodDisruptionBudget, a TriggerAuthentication.
type k8sExtra struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		// Selector is a Service's labels, or a label selector with matchLabels (selects reads both).
		Selector map[string]any `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		PodTargetLabels []string `yaml:"podTargetLabels"`
		Endpoints       []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
		MaxUnavailable  *int `yaml:"maxUnavailable"`
		MinAvailable    *int `yaml:"minAvailable"`
		SecretTargetRef []struct {
			Parameter string `yaml:"parameter"`
			Name      string `yaml:"name"`
			Key       string `yaml:"key"`
		} `yaml:"secretTargetRef"`
		Triggers []struct {
			AuthenticationRef *struct {
				Name string `yaml:"name"`
			} `yaml:"authenticationRef"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

// byKind reads a manifest file's documents of kind.
func byKind(t *testing.T, path, kind string) []k8sExtra {
	t.Helper()
	var out []k8sExtra
	for _, d := range readK8s[k8sExtra](t, path) {
		if d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// selects is the labels a document's selector requires: a Service's own map, or matchLabels.
func (d k8sExtra) selects() map[string]string {
	sel := d.Spec.Selector
	if m, ok := sel["matchLabels"].(map[string]any); ok {
		sel = m
	}
	out := map[string]string{}
	for k, v := range sel {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// matches reports whether a selector's labels are all among labels (and it selects something).
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// Each workload has a PodDisruptionBudget over its pods that lets a drain evict one pod at a time
// (maxUnavailable 1: a drain's eviction is a SIGTERM and a move of that pod's partitions; never two
// shares or two members at once), and sets no minAvailable, which would fight the autoscaler's
// replica count.
func TestK8sPodDisruptionBudgets(t *testing.T) {
	for path, kind := range map[string]string{"k8s/relay.yaml": "StatefulSet", "k8s/relay-group.yaml": "Deployment"} {
		doc, _ := checkWorkload(t, path, kind)
		pdbs := byKind(t, path, "PodDisruptionBudget")
		if len(pdbs) != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets, want 1", path, len(pdbs))
			continue
		}
		p := pdbs[0].Spec
		if sel := pdbs[0].selects(); !matches(sel, doc.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: the PodDisruptionBudget selects %v, not the %s's pods %v", path, sel, kind, doc.Spec.Template.Metadata.Labels)
		}
		if p.MaxUnavailable == nil || *p.MaxUnavailable != 1 || p.MinAvailable != nil {
			t.Errorf("%s: PodDisruptionBudget maxUnavailable %v, minAvailable %v; want maxUnavailable 1 alone", path, p.MaxUnavailable, p.MinAvailable)
		}
	}
}

// The ServiceMonitor scrapes every relay pod (both workloads) on its port named http at /metrics
// through a Service over them, and copies the pod label app onto the series: RelayDown matches
// up{app="relay"}, as with prometheus-scrape.yml.
func TestK8sServiceMonitor(t *testing.T) {
	const path = "k8s/relay-servicemonitor.yaml"
	svcs, sms := byKind(t, path, "Service"), byKind(t, path, "ServiceMonitor")
	if len(svcs) != 1 || len(sms) != 1 {
		t.Fatalf("%s: %d Services, %d ServiceMonitors; want one of each", path, len(svcs), len(sms))
	}
	svc, sm := svcs[0], sms[0].Spec
	for wpath, kind := range map[string]string{"k8s/relay.yaml": "StatefulSet", "k8s/relay-group.yaml": "Deployment"} {
		doc, _ := checkWorkload(t, wpath, kind)
		if !matches(svc.selects(), doc.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: the Service selects %v, not %s's pods %v", path, svc.selects(), wpath, doc.Spec.Template.Metadata.Labels)
		}
		named := false
		for _, p := range doc.Spec.Template.Spec.Containers[0].Ports {
			named = named || (len(svc.Spec.Ports) == 1 && p.Name == svc.Spec.Ports[0].TargetPort)
		}
		if !named {
			t.Errorf("%s: the Service's targetPort %+v is no container port name of %s", path, svc.Spec.Ports, wpath)
		}
	}
	if !matches(sms[0].selects(), svc.Metadata.Labels) {
		t.Errorf("%s: the ServiceMonitor selects %v, not the Service's labels %v", path, sms[0].selects(), svc.Metadata.Labels)
	}
	if len(sm.Endpoints) != 1 || sm.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Endpoints[0].Path != "/metrics" {
		t.Errorf("%s: endpoints %+v, want the Service's port %q at /metrics", path, sm.Endpoints, svc.Spec.Ports[0].Name)
	}
	if !slices.Contains(sm.PodTargetLabels, "app") {
		t.Errorf("%s: podTargetLabels %v lack app, which RelayDown's up{app=\"relay\"} matches", path, sm.PodTargetLabels)
	}
}

// The TriggerAuthentication for a secured Kafka gives KEDA's kafka scaler only parameters it reads,
// each from a key of the Secret beside it; a trigger that references one names it.
func TestK8sKedaTriggerAuthentication(t *testing.T) {
	const path = "k8s/relay-group-keda.yaml"
	auths := byKind(t, path, "TriggerAuthentication")
	if len(auths) != 1 {
		t.Fatalf("%s: %d TriggerAuthentications, want 1", path, len(auths))
	}
	secrets := map[string]map[string]string{}
	for _, s := range byKind(t, path, "Secret") {
		secrets[s.Metadata.Name] = s.StringData
	}
	known := []string{"sasl", "username", "password", "tls", "ca", "cert", "key", "keyPassword", "oauthTokenEndpointUri", "scopes"}
	for _, r := range auths[0].Spec.SecretTargetRef {
		if !slices.Contains(known, r.Parameter) {
			t.Errorf("%s: parameter %q is not one KEDA's kafka scaler reads", path, r.Parameter)
		}
		if _, ok := secrets[r.Name][r.Key]; !ok {
			t.Errorf("%s: parameter %s comes from %s/%s, not a key of a Secret in the file", path, r.Parameter, r.Name, r.Key)
		}
	}
	for _, so := range byKind(t, path, "ScaledObject") {
		for _, tr := range so.Spec.Triggers {
			if tr.AuthenticationRef != nil && tr.AuthenticationRef.Name != auths[0].Metadata.Name {
				t.Errorf("%s: the trigger references %q, not the TriggerAuthentication %s", path, tr.AuthenticationRef.Name, auths[0].Metadata.Name)
			}
		}
	}
}
