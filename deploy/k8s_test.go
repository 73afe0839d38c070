package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/config"
)

// The StatefulSet example maps the pod ordinal to RELAY_INSTANCE with the replica count as M,
// probes /readyz and /healthz, is scraped by Prometheus, and sets only keys relay knows; it talks
// to MySQL over verified TLS, and every *_FILE it names is a key of a mounted secret.
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
	secrets := map[string]map[string]string{} // name -> stringData
	env := map[string]string{}                // the container's variables, secretKeyRefs resolved below
	refs := map[string][2]string{}            // variable -> secret name, key
	mounts := map[string]string{}             // mount path -> secret name
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			StringData map[string]string `yaml:"stringData"`
			Spec       struct {
				Replicas int `yaml:"replicas"`
				Template struct {
					Metadata struct {
						Labels      map[string]string `yaml:"labels"`
						Annotations map[string]string `yaml:"annotations"`
					} `yaml:"metadata"`
					Spec struct {
						Volumes []struct {
							Name   string `yaml:"name"`
							Secret struct {
								SecretName string `yaml:"secretName"`
							} `yaml:"secret"`
						} `yaml:"volumes"`
						Containers []struct {
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
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Secret" {
			secrets[doc.Metadata.Name] = doc.StringData
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
	for name, ref := range refs {
		env[name] = secrets[ref[0]][ref[1]]
	}
	for name, path := range env {
		if !strings.HasSuffix(name, "_FILE") {
			continue
		}
		dir, key := filepath.Split(path)
		secret, mounted := mounts[filepath.Clean(dir)]
		if _, ok := secrets[secret][key]; !mounted || !ok {
			t.Errorf("%s=%s is not a key of a mounted secret", name, path)
		}
	}
	// tls=preferred or skip-verify would hand the password to whoever answers on the path; a CA
	// file overrides the DSN's tls parameter.
	dsn := env["RELAY_MYSQL_DSN"]
	if env["RELAY_MYSQL_TLS_CA_FILE"] == "" && !strings.Contains(dsn, "tls=true") {
		t.Errorf("RELAY_MYSQL_DSN %q: MySQL TLS is not verified (want tls=true or RELAY_MYSQL_TLS_CA_FILE)", dsn)
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		t.Errorf("RELAY_MYSQL_DSN %q: %v", dsn, err)
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
