// Package schema checks the Kubernetes manifests in deploy/k8s against the API's own Go types, the
// ones the API server decodes them into (k8s.io/api), because neither `kubectl --dry-run=client`
// (it asks a server for the schema) nor kubeconform (it downloads schemas) works offline.
//
// Invariant: every document of every deploy/k8s/*.yaml decodes strictly into the type of its
// apiVersion and kind, as the API server decodes it: YAML to JSON without the target type's hints
// (kubectl sends JSON, so `false` stays a boolean), then sigs.k8s.io/json's case-sensitive strict
// decoder. An unknown or misspelt field (in any letter case), a duplicate key or a value of the
// wrong type is an error, and a kind without a type here fails. KEDA's
// ScaledObject and TriggerAuthentication and the Prometheus Operator's ServiceMonitor are custom
// resources: their types are declared below from their documented CRD fields (KEDA v2.x,
// apis/keda/v1alpha1; prometheus-operator monitoring.coreos.com/v1), not imported (KEDA's module
// pulls in every cloud SDK, the operator's a Kubernetes client), so a field added later that a
// declaration lacks fails too; add it here. Only the fields relay's manifests may use are declared
// for ServiceMonitor: one outside them fails, which is the point (deploy/k8s_test.go checks what
// the values must be). What this does not check is
// what the API server validates beyond the schema (names, selector against labels, ranges):
// deploy/k8s_test.go checks the parts relay depends on.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ScaledObject is KEDA's keda.sh/v1alpha1 ScaledObject, from its CRD's documented fields.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ScaleTargetRef *struct {
			Name                   string `json:"name"`
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		InitialCooldownPeriod int32  `json:"initialCooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
				Name     string                                         `json:"name,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			ScalingModifiers              *struct {
				Formula          string                         `json:"formula,omitempty"`
				Target           string                         `json:"target,omitempty"`
				ActivationTarget string                         `json:"activationTarget,omitempty"`
				MetricType       autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
			} `json:"scalingModifiers,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
		} `json:"triggers"`
		Fallback *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
	} `json:"spec"`
}

// TriggerAuthentication is KEDA's keda.sh/v1alpha1 TriggerAuthentication (secrets and variables
// as scaler parameters), from its CRD's documented fields.
type TriggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		PodIdentity *struct {
			Provider   string `json:"provider"`
			IdentityID string `json:"identityId,omitempty"`
		} `json:"podIdentity,omitempty"`
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
		Env []struct {
			Parameter     string `json:"parameter"`
			Name          string `json:"name"`
			ContainerName string `json:"containerName,omitempty"`
		} `json:"env,omitempty"`
	} `json:"spec"`
}

// ServiceMonitor is the Prometheus Operator's monitoring.coreos.com/v1 ServiceMonitor, from its
// CRD's documented fields.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		TargetLabels      []string             `json:"targetLabels,omitempty"`
		PodTargetLabels   []string             `json:"podTargetLabels,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port            string `json:"port,omitempty"`
			Path            string `json:"path,omitempty"`
			Scheme          string `json:"scheme,omitempty"`
			Interval        string `json:"interval,omitempty"`
			ScrapeTimeout   string `json:"scrapeTimeout,omitempty"`
			HonorLabels     bool   `json:"honorLabels,omitempty"`
			HonorTimestamps *bool  `json:"honorTimestamps,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kafkaTrigger is the metadata of KEDA's kafka scaler (its documented parameters). The CRD types
// trigger metadata as a map of strings, which the API server accepts whatever the keys; KEDA only
// reads the keys it knows, so a misspelt one (consumergroup) would silently be ignored.
type kafkaTrigger struct {
	BootstrapServers                   string `json:"bootstrapServers"`
	ConsumerGroup                      string `json:"consumerGroup"`
	Topic                              string `json:"topic,omitempty"`
	LagThreshold                       string `json:"lagThreshold,omitempty"`
	ActivationLagThreshold             string `json:"activationLagThreshold,omitempty"`
	OffsetResetPolicy                  string `json:"offsetResetPolicy,omitempty"`
	AllowIdleConsumers                 string `json:"allowIdleConsumers,omitempty"`
	ScaleToZeroOnInvalidOffset         string `json:"scaleToZeroOnInvalidOffset,omitempty"`
	ExcludePersistentLag               string `json:"excludePersistentLag,omitempty"`
	LimitToPartitionsWithLag           string `json:"limitToPartitionsWithLag,omitempty"`
	EnsureEvenDistributionOfPartitions string `json:"ensureEvenDistributionOfPartitions,omitempty"`
	PartitionLimitation                string `json:"partitionLimitation,omitempty"`
	Version                            string `json:"version,omitempty"`
	SASL                               string `json:"sasl,omitempty"`
	TLS                                string `json:"tls,omitempty"`
	UnsafeSSL                          string `json:"unsafeSsl,omitempty"`
}

// types maps apiVersion/kind to a new value of the type that kind decodes into.
var types = map[string]func() any{
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &ScaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &TriggerAuthentication{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &ServiceMonitor{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// check decodes one document strictly; it returns what it decoded, or an error naming the problem.
func check(doc []byte) (string, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return "", err
	}
	gvk := tm.APIVersion + "/" + tm.Kind
	newObj, ok := types[gvk]
	if !ok {
		return gvk, fmt.Errorf("no type for %s here: add it to types", gvk)
	}
	obj := newObj()
	if err := decodeStrict(doc, obj); err != nil {
		return gvk, err
	}
	if name := obj.(metav1.Object).GetName(); name == "" {
		return gvk, fmt.Errorf("metadata.name is empty")
	}
	if so, ok := obj.(*ScaledObject); ok {
		if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name == "" || len(so.Spec.Triggers) == 0 {
			return gvk, fmt.Errorf("a ScaledObject needs scaleTargetRef.name and triggers")
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "kafka" {
				continue
			}
			b, err := json.Marshal(tr.Metadata)
			if err != nil {
				return gvk, err
			}
			var kt kafkaTrigger
			if err := decodeStrict(b, &kt); err != nil {
				return gvk, fmt.Errorf("kafka trigger metadata: %w", err)
			}
		}
	}
	return gvk, nil
}

// decodeStrict decodes YAML (or JSON) into v the way the API server does, refusing what it refuses.
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func manifests(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s (%v)", err)
	}
	return files
}

// Every manifest shipped in deploy/k8s is one the API server (and KEDA) would decode as written.
func TestManifestsDecodeStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, f := range manifests(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range separator.Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			gvk, err := check([]byte(doc))
			if err != nil {
				t.Errorf("%s document %d (%s): %v", filepath.Base(f), i, gvk, err)
				continue
			}
			kinds[gvk]++
		}
	}
	t.Logf("decoded: %v", kinds)
	for gvk := range types {
		if kinds[gvk] == 0 {
			t.Errorf("no manifest holds a %s: its type here is unused", gvk)
		}
	}
}

// The check itself: a misspelt field anywhere, a value of the wrong type, an unknown kind and an
// unknown kafka trigger parameter each fail it.
func TestStrictDecodeRefuses(t *testing.T) {
	cases := map[string]string{
		"misspelt pod field": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      terminationGracePeriod: 90
      containers: [{name: x, image: x}]
`,
		"wrong type": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: x}
spec:
  scaleTargetRef: {kind: Deployment, name: x}
  maxReplicas: "twelve"
`,
		"letter case": `apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  clusterIp: None
`,
		"unknown kind":     "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"no name":          "apiVersion: v1\nkind: Secret\nmetadata: {}\n",
		"misspelt keda":    "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  maxReplicas: 3\n  triggers: [{type: kafka, metadata: {bootstrapServers: b, consumerGroup: g}}]\n",
		"misspelt trigger": "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  triggers: [{type: kafka, metadata: {bootstrapServers: b, consumergroup: g}}]\n",
		"misspelt monitor": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {a: b}}\n  podTargetLabel: [app]\n  endpoints: [{port: http}]\n",
		"misspelt auth":    "apiVersion: keda.sh/v1alpha1\nkind: TriggerAuthentication\nmetadata: {name: x}\nspec:\n  secretTargetRefs: [{parameter: sasl, name: s, key: k}]\n",
		"bool in metadata": "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  triggers: [{type: kafka, metadata: {bootstrapServers: b, consumerGroup: g, allowIdleConsumers: false}}]\n",
	}
	for name, doc := range cases {
		if _, err := check([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	ok := "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  triggers: [{type: kafka, metadata: {bootstrapServers: b, consumerGroup: g}}]\n"
	if _, err := check([]byte(ok)); err != nil {
		t.Errorf("a minimal ScaledObject was refused: %v", err)
	}
}

// stripComments drops comment lines, so a file's header alone is no document.
func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
