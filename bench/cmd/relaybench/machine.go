package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
)

// Machine describes where the numbers were taken.
type Machine struct {
	Date        string `json:"date"`
	NProc       int    `json:"nproc"`
	CPUModel    string `json:"cpu_model"`
	MemTotal    string `json:"mem_total"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	MySQL       string `json:"mysql_version"`
	Kafka       string `json:"kafka_version"`
	Librdkafka  string `json:"librdkafka_version"`
	LoadAvg     string `json:"loadavg_at_start"`
	RelayCommit string `json:"relay_commit"`
}

func machineFacts(e *kit.Env) (*Machine, error) {
	m := &Machine{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), NProc: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(rest)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		m.LoadAvg = strings.Join(f[:3], " ")
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out))
	} else {
		m.GoVersion = runtime.Version()
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		m.RelayCommit = strings.TrimSpace(string(out))
	}
	_, m.Librdkafka = kafka.LibraryVersion()
	m.Kafka = kafkaVersion(e.Root)
	db, err := harness.Open(e.AdminDSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	m.MySQL = kit.ServerVersion(db)
	return m, nil
}

// kafkaVersion reads the broker version from the jar scripts/services.sh runs (4.1.1 by default).
func kafkaVersion(root string) string {
	jars, _ := filepath.Glob(filepath.Join(root, ".cache/kafka/lib/kafka-server-[0-9]*.jar"))
	for _, j := range jars {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(j), "kafka-server-"), ".jar")
		return "Apache Kafka " + v + " (KRaft, single node)"
	}
	return "unknown (external broker)"
}
