package crash

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/testenv"
)

// A Kafka property librdkafka does not know stops relay before it touches MySQL (no fence, not
// even a table), and the error names the key, not the value. Passwords from files reach MySQL and
// librdkafka intact (a comma and a backslash included) and never the log.
func TestPropertyCheckAndSecretFiles(t *testing.T) {
	e := newEnv(t, 1)
	const kafkaSecret = `Pw,kafka\51be2d`
	refused := e.start("RELAY_KAFKA_PROPERTIES=sasl.username=relay,sasl.pasword=Pw-kafka-51be2d")
	if err := refused.wait(t, 30*time.Second); err == nil {
		t.Fatalf("relay ran with an unknown librdkafka property\n%s", tail(refused.Log, 10))
	}
	if log := tail(refused.Log, 20); !strings.Contains(log, `"sasl.pasword" is not a librdkafka`) || strings.Contains(log, "Pw-kafka") {
		t.Errorf("the refusal does not name the key, or shows the value:\n%s", log)
	}
	var tables int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("the refused run created %d tables: it connected before refusing", tables)
	}

	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	mysqlSecret := cfg.Passwd
	cfg.Passwd = ""
	kafkaFile, mysqlFile := filepath.Join(e.dir, "kafka-password"), filepath.Join(e.dir, "mysql-password")
	if err := os.WriteFile(kafkaFile, []byte(kafkaSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mysqlFile, []byte(mysqlSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := e.start("RELAY_MYSQL_DSN="+cfg.FormatDSN(), "RELAY_MYSQL_PASSWORD_FILE="+mysqlFile,
		"RELAY_KAFKA_PROPERTIES=sasl.username=relay", "RELAY_KAFKA_SASL_PASSWORD_FILE="+kafkaFile)
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, ok.Log, "recovered")) > 0 }, "relay running with passwords from files")
	ok.Kill()
	b, err := os.ReadFile(ok.Log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), kafkaSecret) {
		t.Errorf("%s holds the Kafka secret", ok.Log)
	}
}
