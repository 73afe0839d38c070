package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/config"
)

// The StatefulSet example maps the pod ordinal to RELAY_INSTANCE with the replica count as M,
// probes /readyz and /healthz, is scraped by Prometheus, and sets only keys relay knows.
func TestK8sStatefulSet(t *testing.T) {
	b, err := os.ReadFile("k8s/relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range config.Fields() {
		known[f.Env] = true
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	found := false
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Replicas int `yaml:"replicas"`
				Template struct {
					Metadata struct {
						Labels      map[string]string `yaml:"labels"`
						Annotations map[string]string `yaml:"annotations"`
					} `yaml:"metadata"`
					Spec struct {
						Containers []struct {
							Env []struct {
								Name  string `yaml:"name"`
								Value string `yaml:"value"`
							} `yaml:"env"`
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
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind != "StatefulSet" {
			continue
		}
		found = true
		tpl := doc.Spec.Template
		if tpl.Metadata.Annotations["prometheus.io/scrape"] != "true" || tpl.Metadata.Annotations["prometheus.io/path"] != "/metrics" {
			t.Errorf("scrape annotations: %v", tpl.Metadata.Annotations)
		}
		// The scrape job copies pod labels; app="relay" is what the alert rules select targets by.
		if tpl.Metadata.Labels["app"] != "relay" {
			t.Errorf("pod labels %v lack app: relay, which RelayDown's up{app=\"relay\"} matches", tpl.Metadata.Labels)
		}
		c := tpl.Spec.Containers[0]
		if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("probes: readiness %q liveness %q", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
		}
		instance := ""
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "RELAY_") && !known[e.Name] {
				t.Errorf("env %s is not a relay configuration key", e.Name)
			}
			if e.Name == "RELAY_INSTANCE" {
				instance = e.Value
			}
		}
		if want := "$(POD_INDEX)/" + strconv.Itoa(doc.Spec.Replicas); instance != want {
			t.Errorf("RELAY_INSTANCE = %q, want %q (the ordinal of replicas)", instance, want)
		}
		if _, _, err := config.ParseInstance(strings.Replace(instance, "$(POD_INDEX)", "0", 1)); err != nil {
			t.Errorf("RELAY_INSTANCE for pod 0: %v", err)
		}
	}
	if !found {
		t.Fatal("no StatefulSet in k8s/relay.yaml")
	}
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
