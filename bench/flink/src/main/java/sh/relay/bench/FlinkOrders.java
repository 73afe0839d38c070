package sh.relay.bench;

import com.mysql.cj.jdbc.MysqlXADataSource;
import java.math.BigDecimal;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.jdbc.JdbcExactlyOnceOptions;
import org.apache.flink.connector.jdbc.JdbcExecutionOptions;
import org.apache.flink.connector.jdbc.core.datastream.sink.JdbcSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.CheckpointingMode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * relay's default pipeline as a Flink job, for relaybench's `flink` step (bench/cmd/relaybench/flink.go):
 * relay loadgen's orders from Kafka (read_committed, from the earliest offset) into
 * order_stats_minute, a count and an exact sum of amount per (one-minute window, sku), through
 * Flink's exactly-once (XA) JDBC sink, in a local MiniCluster inside this JVM.
 *
 * <p>Variants (--variant): "per-record" writes every order as an additive upsert of (1, amount);
 * "pre-aggregated" sums per key and writes one additive upsert per key and checkpoint. The job
 * never ends by itself: the bench polls the table and stops the JVM once it holds the totals.
 */
public final class FlinkOrders {
    static final String UPSERT = "INSERT INTO order_stats_minute (window_start, sku, order_count, amount_sum) VALUES (?, ?, ?, ?)"
            + " ON DUPLICATE KEY UPDATE order_count = order_count + VALUES(order_count), amount_sum = amount_sum + VALUES(amount_sum)";

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        String variant = a.get("variant");
        if (!"per-record".equals(variant) && !"pre-aggregated".equals(variant)) throw new IllegalArgumentException("--variant per-record|pre-aggregated");
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "4"));
        String url = Objects.requireNonNull(a.get("jdbc-url"), "--jdbc-url");

        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        conf.setString("restart-strategy.type", "none"); // a failure ends the run instead of hiding in a restart
        if (a.containsKey("job-id")) conf.setString("$internal.pipeline.job-id", a.get("job-id")); // the XA branches' gtrid prefix
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.enableCheckpointing(Long.parseLong(a.getOrDefault("interval-ms", "1000")), CheckpointingMode.EXACTLY_ONCE);

        KafkaSource<Delta> source = KafkaSource.<Delta>builder()
                .setBootstrapServers(a.get("brokers")).setTopics(a.get("topic")).setGroupId(a.getOrDefault("group", "relay-flink-bench"))
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setProperty("isolation.level", "read_committed")
                .setProperty("commit.offsets.on.checkpoint", "false") // Flink's checkpoint holds the offsets
                .setValueOnlyDeserializer(new OrderSchema())
                .build();
        KeyedStream<Delta, Tuple2<Long, String>> keyed = env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka")
                .keyBy(new KeySelector<Delta, Tuple2<Long, String>>() {
                    @Override
                    public Tuple2<Long, String> getKey(Delta d) {
                        return Tuple2.of(d.window, d.sku);
                    }
                });
        DataStream<Delta> rows = "pre-aggregated".equals(variant)
                ? keyed.transform("pre-aggregate", TypeInformation.of(Delta.class), new PreAggregate())
                : keyed;

        // The XA sink prepares one branch per subtask and checkpoint and commits it when the
        // checkpoint completes (maxRetries must be 0; MySQL/MariaDB need a connection per
        // transaction). Batches are flushed only at the checkpoint (batch size above what one
        // subtask receives in an interval, no timer): a flush in the middle of an interval could
        // wait on a row lock held by the subtask's own previous branch, prepared but not yet
        // committed, and that commit runs on the very task thread that would be waiting.
        int batch = Integer.parseInt(a.getOrDefault("batch-size", "1000000"));
        String user = a.getOrDefault("user", ""), password = System.getenv().getOrDefault("RELAY_BENCH_JDBC_PASSWORD", "");
        rows.sinkTo(JdbcSink.<Delta>builder()
                        .withQueryStatement(UPSERT, (ps, d) -> {
                            ps.setObject(1, LocalDateTime.ofEpochSecond(d.window / 1000, 0, ZoneOffset.UTC));
                            ps.setString(2, d.sku);
                            ps.setLong(3, d.count);
                            ps.setBigDecimal(4, BigDecimal.valueOf(d.units, 4));
                        })
                        .withExecutionOptions(JdbcExecutionOptions.builder().withMaxRetries(0).withBatchSize(batch).withBatchIntervalMs(0).build())
                        .buildExactlyOnce(JdbcExactlyOnceOptions.builder().withTransactionPerConnection(true).build(), () -> {
                            MysqlXADataSource ds = new MysqlXADataSource();
                            ds.setUrl(url);
                            ds.setUser(user);
                            ds.setPassword(password);
                            return ds;
                        }))
                .name("xa-jdbc");
        env.execute("relay-flink-bench " + variant);
    }

    /** One order (count 1) or a per-key delta; amount in units of 10^-4 (DECIMAL(38,4)). Key: (window, sku). */
    public static final class Delta {
        public long window; // window start, epoch ms
        public String sku;
        public long count;
        public long units;

        public Delta() {}

        @Override
        public boolean equals(Object o) {
            return o instanceof Delta && ((Delta) o).window == window && ((Delta) o).sku.equals(sku);
        }

        @Override
        public int hashCode() {
            return Long.hashCode(window) * 31 + sku.hashCode();
        }
    }

    /** relay loadgen's JSON ({"order_id", "sku", "amount" as a decimal string, "ts" in epoch ms}) to a Delta. */
    static final class OrderSchema implements DeserializationSchema<Delta> {
        static final AtomicBoolean FIRST = new AtomicBoolean(); // the MiniCluster shares this JVM
        private transient ObjectMapper json;

        @Override
        public Delta deserialize(byte[] message) throws java.io.IOException {
            if (json == null) json = new ObjectMapper();
            if (!FIRST.get() && FIRST.compareAndSet(false, true)) System.out.println("first-record-unix-ms " + System.currentTimeMillis());
            JsonNode n = json.readTree(message);
            Delta d = new Delta();
            long ts = n.get("ts").asLong();
            d.window = Math.floorDiv(ts, 60_000L) * 60_000L;
            d.sku = n.get("sku").asText();
            d.count = 1;
            JsonNode amt = n.get("amount");
            d.units = new BigDecimal(amt.isTextual() ? amt.asText() : amt.toString()).movePointRight(4).longValueExact(); // more than 4 decimals: an error, as relay refuses them
            return d;
        }

        @Override
        public boolean isEndOfStream(Delta next) {
            return false;
        }

        @Override
        public TypeInformation<Delta> getProducedType() {
            return TypeInformation.of(Delta.class);
        }
    }

    /**
     * Sums per key and emits every key's delta once per checkpoint, from prepareSnapshotPreBarrier:
     * Flink calls it when checkpoint n's barrier has reached this operator and before it passes the
     * barrier on, walking the operator chain from head to tail, so the deltas of exactly the records
     * before barrier n reach the sink (chained behind this operator) ahead of the sink's own
     * pre-barrier flush and land in the sink's XA branch of checkpoint n (Flink's own mini-batch
     * operators, MapBundleOperator, emit the same way). The map is therefore empty whenever state
     * is snapshotted, so there is nothing to checkpoint: after a failure the source rewinds to
     * checkpoint n's offsets and every record after them is folded anew. A timer-driven flush would
     * be correct too (map and timers in keyed state) but would write each key more than once per
     * checkpoint whenever the timer and the checkpoint drift apart.
     */
    static final class PreAggregate extends AbstractStreamOperator<Delta> implements OneInputStreamOperator<Delta, Delta> {
        private transient HashMap<Delta, Delta> pending;

        @Override
        public void open() throws Exception {
            super.open();
            pending = new HashMap<>();
        }

        @Override
        public void processElement(StreamRecord<Delta> r) {
            pending.merge(r.getValue(), r.getValue(), (acc, d) -> {
                acc.count += d.count;
                acc.units = Math.addExact(acc.units, d.units);
                return acc;
            });
        }

        @Override
        public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
            super.prepareSnapshotPreBarrier(checkpointId);
            for (Delta d : pending.values()) output.collect(new StreamRecord<>(d));
            pending.clear();
        }

        @Override
        public void finish() throws Exception {
            prepareSnapshotPreBarrier(-1); // end of input (never reached: the source is unbounded)
            super.finish();
        }
    }
}
