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
