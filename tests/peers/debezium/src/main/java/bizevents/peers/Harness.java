package bizevents.peers;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.BufferedWriter;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Debezium's embedded engine as a peer of bizevents capture in tests and benchmarks: it runs
 * the connector the properties file names and writes each record as one JSON line
 * {"topic": ..., "key": ..., "value": ...} (key and value as the JSON converter wrote them,
 * null for a tombstone), then a summary line on stderr: the records, the wall clock and the
 * whole process's CPU (every thread: JIT and GC too) at the first change and the last.
 *
 * <p>Usage: Harness PROPERTIES OUT [--max N] [--idle-ms MS] [--until-topic SUFFIX] [--from K]
 *
 * <p>The summary's "first" clock and CPU are taken at the K-th change (default the first):
 * a benchmark leaves the JIT's warm-up out that way.
 *
 * <p>It stops after N records whose topic is not the transaction topic, after MS without a
 * record (once one came), or one second after a record whose topic ends with SUFFIX (the
 * tests' end marker; the second lets the transaction's END record follow).
 */
public final class Harness {
  private static final Object LOCK = new Object();
  private static final AtomicLong RECORDS = new AtomicLong();
  private static final AtomicLong CHANGES = new AtomicLong();
  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
  private static volatile long firstNanos;
  private static volatile long firstCpuNanos;
  private static volatile long lastCpuNanos;
  private static volatile long lastNanos;
  private static volatile long markerNanos;
  private static volatile Throwable failure;

  private Harness() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: Harness PROPS OUT [--max N] [--idle-ms MS] [--until-topic S] [--from K]");
      System.exit(2);
    }
    Properties props = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      props.load(in);
    }
    long max = Long.MAX_VALUE;
    long idleMs = 0;
    String untilTopic = null;
    long fromChange = 1;
    for (int i = 2; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--max" -> max = Long.parseLong(args[i + 1]);
        case "--idle-ms" -> idleMs = Long.parseLong(args[i + 1]);
        case "--until-topic" -> untilTopic = args[i + 1];
        case "--from" -> fromChange = Long.parseLong(args[i + 1]);
        default -> {
          System.err.println("unknown option " + args[i]);
          System.exit(2);
        }
      }
    }
    String txTopic = props.getProperty("topic.prefix", "") + ".transaction";
    String marker = untilTopic;
    long from = fromChange;
    Writer out =
        new BufferedWriter(
            new OutputStreamWriter(
                "-".equals(args[1]) ? System.out : new FileOutputStream(args[1]),
                StandardCharsets.UTF_8),
            1 << 16);
    DebeziumEngine<ChangeEvent<String, String>> engine =
        DebeziumEngine.create(Json.class)
            .using(props)
            .notifying(
                (List<ChangeEvent<String, String>> batch,
                    DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                  long now = System.nanoTime();
                  synchronized (LOCK) {
                    try {
                      for (ChangeEvent<String, String> record : batch) {
                        String topic = record.destination();
                        out.write("{\"topic\":\"");
                        out.write(topic);
                        out.write("\",\"key\":");
                        out.write(record.key() == null ? "null" : record.key());
                        out.write(",\"value\":");
                        out.write(record.value() == null ? "null" : record.value());
                        out.write("}\n");
                        RECORDS.incrementAndGet();
                        if (!topic.equals(txTopic)) {
                          if (CHANGES.incrementAndGet() == from) {
                            firstNanos = now;
                            firstCpuNanos = OS.getProcessCpuTime();
                          }
                        }
                        if (marker != null && markerNanos == 0 && topic.endsWith(marker)) {
                          markerNanos = now;
                        }
                        committer.markProcessed(record);
                      }
                      out.flush();
                    } catch (IOException e) {
                      throw new UncheckedIOException(e);
                    }
                    lastNanos = now;
                    lastCpuNanos = OS.getProcessCpuTime();
                  }
                  committer.markBatchFinished();
                })
            .using(
                (success, message, error) -> {
                  if (!success) {
                    failure = error != null ? error : new IllegalStateException(message);
                  }
                })
            .build();
    ExecutorService executor = Executors.newSingleThreadExecutor();
    executor.execute(engine);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    engine.close();
                  } catch (IOException | IllegalStateException e) {
                    // stopping anyway
                  }
                }));
    while (true) {
      Thread.sleep(20);
      long now = System.nanoTime();
      if (failure != null || executor.isTerminated()) {
        break;
      }
      if (CHANGES.get() >= max) {
        break;
      }
      if (idleMs > 0 && lastNanos != 0 && now - lastNanos > idleMs * 1_000_000L) {
        break;
      }
      if (markerNanos != 0 && now - markerNanos > 1_000_000_000L) {
        break;
      }
    }
    try {
      engine.close();
    } catch (IllegalStateException e) {
      // the engine stopped by itself (it failed): nothing to close
    }
    executor.shutdown();
    executor.awaitTermination(60, TimeUnit.SECONDS);
    synchronized (LOCK) {
      out.flush();
    }
    if (failure == null && CHANGES.get() == 0 && RECORDS.get() == 0 && executor.isTerminated()) {
      failure = new IllegalStateException("the engine stopped before any record");
    }
    System.err.printf(
        "{\"records\": %d, \"changes\": %d, \"first_ns\": %d, \"last_ns\": %d, "
            + "\"first_cpu_ns\": %d, \"last_cpu_ns\": %d}%n",
        RECORDS.get(),
        CHANGES.get(),
        firstNanos,
        lastNanos,
        firstCpuNanos,
        lastCpuNanos);
    if (failure != null) {
      System.err.println("debezium failed: " + failure);
      failure.printStackTrace();
      System.exit(1);
    }
    System.exit(0);
  }
}
