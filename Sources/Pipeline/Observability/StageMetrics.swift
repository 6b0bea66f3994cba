import Metrics
import Kafka
import Synchronization

/// Every metric a worker exports, named once. Prometheus names (through swift-prometheus):
///
/// | metric | type | labels |
/// | --- | --- | --- |
/// | `pipeline_records_in_total` | counter | stage |
/// | `pipeline_inputs_settled_total` | counter | stage (inputs whose outputs and dead letters are all delivered) |
/// | `pipeline_records_out_total` | counter | stage, topic |
/// | `pipeline_dead_letters_total` | counter | stage, reason |
/// | `pipeline_batch_processing_seconds` | histogram | stage |
/// | `pipeline_end_to_end_latency_seconds` | histogram | stage |
/// | `pipeline_consumer_lag_records`, `pipeline_consumer_lag_seconds` | gauge | stage, topic, partition |
/// | `pipeline_rebalances_total`, `pipeline_commit_failures_total`, `pipeline_delivery_retries_total`, `pipeline_delivery_errors_total` | counter | stage |
/// | `pipeline_outputs_resent_total` | counter | stage (outputs sent again because an earlier output of their partition was retried after they landed: their last copy comes after it) |
/// | `pipeline_paused_partitions`, `pipeline_assigned_partitions`, `pipeline_producer_queue_messages`, `pipeline_in_flight_records` | gauge | stage |
/// | `pipeline_checkpoints_total` | counter | stage |
/// | `pipeline_checkpoints_waiting` | gauge | stage (checkpoints taken and not yet durable: they wait for every output before them; one that stays up means outputs that are not delivered) |
/// | `pipeline_restored_partitions_total` | counter | stage (partitions whose state was restored from the changelog) |
/// | `pipeline_fetched_records` | gauge | stage (records the consumer received from the brokers, librdkafka's `rxmsgs`: above what was processed plus what is fetched ahead, records were fetched twice) |
/// | `pipeline_aborted_records_total` | counter | stage, kind (`output`, `dead-letter`: written in aborted exactly-once transactions, hidden from `read_committed` readers and written again) |
/// | `pipeline_backpressure_waits_total` | counter | stage (times the in-flight bound was reached and the worker waited for deliveries before taking more input) |
/// | `pipeline_loop_busy_seconds_total` | counter | stage (time the event loop spent handling records and events: a rate near 1 means the loop is the limit; add workers) |
/// | `kafka_consumergroup_group_lag`, `kafka_consumergroup_group_offset`, `kafka_partition_latest_offset` | gauge | group, topic, partition (kafka-lag-exporter names, from librdkafka statistics) |
/// | `kafka_client_broker_rtt_seconds` | gauge | client, broker (librdkafka statistics, average round trip) |
public enum MetricName {
    public static let recordsIn = "pipeline_records_in_total"
    public static let inputsSettled = "pipeline_inputs_settled_total"
    public static let recordsOut = "pipeline_records_out_total"
    public static let deadLetters = "pipeline_dead_letters_total"
    public static let batchProcessing = "pipeline_batch_processing_seconds"
    public static let endToEndLatency = "pipeline_end_to_end_latency_seconds"
    public static let lagRecords = "pipeline_consumer_lag_records"
    public static let lagSeconds = "pipeline_consumer_lag_seconds"
    public static let rebalances = "pipeline_rebalances_total"
    public static let commitFailures = "pipeline_commit_failures_total"
    public static let retries = "pipeline_delivery_retries_total"
    public static let deliveryErrors = "pipeline_delivery_errors_total"
    public static let resent = "pipeline_outputs_resent_total"
    public static let pausedPartitions = "pipeline_paused_partitions"
    public static let assignedPartitions = "pipeline_assigned_partitions"
    public static let producerQueue = "pipeline_producer_queue_messages"
    public static let inFlightRecords = "pipeline_in_flight_records"
    public static let checkpoints = "pipeline_checkpoints_total"
    public static let checkpointsWaiting = "pipeline_checkpoints_waiting"
    public static let restoredPartitions = "pipeline_restored_partitions_total"
    public static let fetchedRecords = "pipeline_fetched_records"
    public static let abortedRecords = "pipeline_aborted_records_total"
    public static let backpressureWaits = "pipeline_backpressure_waits_total"
    public static let transactions = "pipeline_transactions_total"
    public static let loopBusy = "pipeline_loop_busy_seconds_total"
    public static let groupLag = "kafka_consumergroup_group_lag"
    public static let groupOffset = "kafka_consumergroup_group_offset"
    public static let latestOffset = "kafka_partition_latest_offset"
    public static let brokerRTT = "kafka_client_broker_rtt_seconds"

    /// Every name above (the dashboard and alert tests check their queries against these).
    public static let all = [
        recordsIn, inputsSettled, recordsOut, deadLetters, batchProcessing, endToEndLatency, lagRecords, lagSeconds, rebalances,
        commitFailures, retries, deliveryErrors, resent, pausedPartitions, assignedPartitions, producerQueue, inFlightRecords,
        checkpoints, checkpointsWaiting, restoredPartitions, fetchedRecords, abortedRecords, backpressureWaits, transactions, loopBusy,
        groupLag, groupOffset, latestOffset, brokerRTT,
    ]
}

/// A stage's metric handles, made once (the swift-metrics factory is consulted per handle, not
/// per record); per-topic and per-partition handles are cached where they are used.
///
/// The metrics are the one store of what a stage did: tests read them through the factory they
/// pass in (swift-metrics' `MetricsTestKit`), and the few totals the worker reads back about
/// itself (its status report, its summary) are kept by the handles of those metrics
/// (``ReadBack``), not counted a second time.
struct StageMetrics: Sendable {
    let stage: String
    let factory: any MetricsFactory
    let recordsIn: Counter
    let inputsSettled: Counter
    let batchProcessing: Metrics.Timer
    let endToEndLatency: Metrics.Timer
    let rebalances: Counter
    let commitFailures: Counter
    let retries: Counter
    let resent: Counter
    let deliveryErrors: Counter
    let checkpoints: Counter
    let checkpointsWaiting: Gauge
    let restoredPartitions: Counter
    let backpressureWaits: Counter
    /// Seconds the event loop was busy (not waiting for the next event).
    let loopBusy: FloatingPointCounter
    /// Exactly-once transactions by outcome (0 for an at-least-once stage), and the records
    /// written in aborted ones.
    let transactionsCommitted: Counter
    let transactionsAborted: Counter
    let abortedOutputs: Counter
    let abortedDeadLetters: Counter
    let pausedPartitions: Gauge
    let assignedPartitions: Gauge
    let producerQueue: Gauge
    let inFlightRecords: Gauge
    let fetchedRecords: Gauge
    /// The totals the worker reads back, kept by the handles above.
    let readBack = ReadBack()

    /// What the worker reads back about itself; each value is the total of a metric's handle.
    final class ReadBack: Sendable {
        let processed = Total()
        let inputsSettled = Total()
        /// Every `pipeline_records_out_total` of the stage, whatever the topic.
        let produced = Total()
        /// Every `pipeline_dead_letters_total` of the stage, whatever the reason.
        let deadLettered = Total()
        let inFlightRecords = Total()
        /// Every `pipeline_delivery_errors_total` and `pipeline_commit_failures_total`.
        let errors = Total()
        /// `pipeline_records_out_total` per output topic.
        let producedByTopic = Mutex<[String: Total]>([:])
        /// The end-to-end latencies since the status report last took them.
        let latency = Mutex(LatencyWindow())
        let loopBusy = Seconds()
        /// When the first input was processed and the last output settled (benchmarks count from
        /// the first record to the last acknowledged output, so start-up and group join do not count).
        let firstProcessed = Mutex<ContinuousClock.Instant?>(nil)
        let lastSettled = Mutex<ContinuousClock.Instant?>(nil)
    }

    init(stage: String, factory: any MetricsFactory = MetricsSystem.factory) {
        self.stage = stage
        self.factory = factory
        let d = [("stage", stage)]
        let readBack = self.readBack
        recordsIn = Self.counter(MetricName.recordsIn, d, factory, total: readBack.processed)
        inputsSettled = Self.counter(MetricName.inputsSettled, d, factory, total: readBack.inputsSettled)
        batchProcessing = Metrics.Timer(label: MetricName.batchProcessing, dimensions: d, factory: factory)
        endToEndLatency = Metrics.Timer(
            label: MetricName.endToEndLatency, dimensions: d,
            handler: ReadBackTimer(factory.makeTimer(label: MetricName.endToEndLatency, dimensions: d), readBack: readBack), factory: factory)
        rebalances = Counter(label: MetricName.rebalances, dimensions: d, factory: factory)
        commitFailures = Self.counter(MetricName.commitFailures, d, factory, total: readBack.errors)
        retries = Counter(label: MetricName.retries, dimensions: d, factory: factory)
        resent = Counter(label: MetricName.resent, dimensions: d, factory: factory)
        deliveryErrors = Self.counter(MetricName.deliveryErrors, d, factory, total: readBack.errors)
        checkpoints = Counter(label: MetricName.checkpoints, dimensions: d, factory: factory)
        checkpointsWaiting = Gauge(label: MetricName.checkpointsWaiting, dimensions: d, factory: factory)
        restoredPartitions = Counter(label: MetricName.restoredPartitions, dimensions: d, factory: factory)
        backpressureWaits = Counter(label: MetricName.backpressureWaits, dimensions: d, factory: factory)
        let busyLabel = MetricName.loopBusy
        loopBusy = FloatingPointCounter(
            label: busyLabel, dimensions: d,
            handler: ReadBackSeconds(factory.makeFloatingPointCounter(label: busyLabel, dimensions: d), total: readBack.loopBusy),
            factory: factory)
        transactionsCommitted = Counter(label: MetricName.transactions, dimensions: d + [("outcome", "committed")], factory: factory)
        transactionsAborted = Counter(label: MetricName.transactions, dimensions: d + [("outcome", "aborted")], factory: factory)
        abortedOutputs = Counter(label: MetricName.abortedRecords, dimensions: d + [("kind", "output")], factory: factory)
        abortedDeadLetters = Counter(label: MetricName.abortedRecords, dimensions: d + [("kind", "dead-letter")], factory: factory)
        pausedPartitions = Gauge(label: MetricName.pausedPartitions, dimensions: d, factory: factory)
        assignedPartitions = Gauge(label: MetricName.assignedPartitions, dimensions: d, factory: factory)
        producerQueue = Gauge(label: MetricName.producerQueue, dimensions: d, factory: factory)
        inFlightRecords = Self.gauge(MetricName.inFlightRecords, d, factory, last: readBack.inFlightRecords)
        fetchedRecords = Gauge(label: MetricName.fetchedRecords, dimensions: d, factory: factory)
    }

    private static func counter(_ label: String, _ dimensions: [(String, String)], _ factory: any MetricsFactory, total: Total, also: Total? = nil) -> Counter {
        Counter(
            label: label, dimensions: dimensions,
            handler: ReadBackCounter(factory.makeCounter(label: label, dimensions: dimensions), total: total, also: also), factory: factory)
    }

    private static func gauge(_ label: String, _ dimensions: [(String, String)], _ factory: any MetricsFactory, last: Total) -> Gauge {
        // A gauge is a recorder that does not aggregate, made through the factory like any other.
        Gauge(
            label: label, dimensions: dimensions, aggregate: false,
            handler: ReadBackGauge(factory.makeRecorder(label: label, dimensions: dimensions, aggregate: false), last: last),
            factory: factory)
    }

    func recordsOut(topic: String) -> Counter {
        let perTopic = readBack.producedByTopic.withLock { totals in
            if let total = totals[topic] { return total }
            let total = Total()
            totals[topic] = total
            return total
        }
        return Self.counter(MetricName.recordsOut, [("stage", stage), ("topic", topic)], factory, total: readBack.produced, also: perTopic)
    }

    func deadLetters(reason: String) -> Counter {
        Self.counter(MetricName.deadLetters, [("stage", stage), ("reason", reason)], factory, total: readBack.deadLettered)
    }

    func lag(_ tp: TopicPartition) -> (records: Gauge, seconds: Gauge) {
        let d = [("stage", stage), ("topic", tp.topic), ("partition", String(tp.partition))]
        return (Gauge(label: MetricName.lagRecords, dimensions: d, factory: factory), Gauge(label: MetricName.lagSeconds, dimensions: d, factory: factory))
    }

    /// librdkafka's view, under kafka-lag-exporter's names.
    static func report(_ stats: KafkaStatistics, group: String?) {
        for p in stats.partitions {
            let d = [("group", group ?? ""), ("topic", p.topic), ("partition", String(p.partition))]
            if let group, !group.isEmpty {
                if p.consumerLag >= 0 { Gauge(label: MetricName.groupLag, dimensions: d).record(p.consumerLag) }
                if p.committedOffset >= 0 { Gauge(label: MetricName.groupOffset, dimensions: d).record(p.committedOffset) }
            }
            if p.highWatermark >= 0 {
                Gauge(label: MetricName.latestOffset, dimensions: [("topic", p.topic), ("partition", String(p.partition))]).record(p.highWatermark)
            }
        }
        for b in stats.brokers where b.rttAverage >= 0 {
            Gauge(label: MetricName.brokerRTT, dimensions: [("client", stats.clientName), ("broker", b.name)])
                .record(Double(b.rttAverage) / 1_000_000)
        }
    }
}

/// A total the worker reads back (relaxed: read for reports, never for synchronisation).
final class Total: Sendable {
    private let atomic = Atomic<Int>(0)
    func add(_ n: Int) { atomic.add(n) }
    func store(_ n: Int) { atomic.store(n, ordering: .relaxed) }
    var value: Int { atomic.value }
}

/// Seconds the worker reads back.
final class Seconds: Sendable {
    private let seconds = Mutex<Double>(0)
    func add(_ amount: Double) { seconds.withLock { $0 += amount } }
    var value: Double { seconds.withLock { $0 } }
}

/// Forwards to the factory's handler and adds to a ``Total``: the exported metric and the total
/// the worker reads are one count.
private final class ReadBackCounter: CounterHandler, Sendable {
    let exported: any CounterHandler
    let total: Total
    /// A second total the count also goes to (a topic's share of the stage's outputs).
    let also: Total?
    init(_ exported: any CounterHandler, total: Total, also: Total? = nil) {
        self.exported = exported
        self.total = total
        self.also = also
    }
    func increment(by amount: Int64) {
        total.add(Int(amount))
        also?.add(Int(amount))
        exported.increment(by: amount)
    }
    func reset() { exported.reset() }
}

/// Forwards to the factory's handler and keeps the last value.
private final class ReadBackGauge: RecorderHandler, Sendable {
    let exported: any RecorderHandler
    let last: Total
    init(_ exported: any RecorderHandler, last: Total) {
        self.exported = exported
        self.last = last
    }
    func record(_ value: Int64) {
        last.store(Int(value))
        exported.record(value)
    }
    func record(_ value: Double) {
        if value.isFinite { last.store(Int(max(-9.0e18, min(9.0e18, value)))) }
        exported.record(value)
    }
}

/// Forwards to the factory's handler and adds to the seconds the worker reads back.
private final class ReadBackSeconds: FloatingPointCounterHandler, Sendable {
    let exported: any FloatingPointCounterHandler
    let total: Seconds
    init(_ exported: any FloatingPointCounterHandler, total: Seconds) {
        self.exported = exported
        self.total = total
    }
    func increment(by amount: Double) {
        total.add(amount)
        exported.increment(by: amount)
    }
    func reset() { exported.reset() }
}

/// End-to-end latencies since the status report last took them: how many, their sum and the
/// largest (the report's mean and max over its interval).
struct LatencyWindow: Sendable {
    var count = 0
    var sumNanoseconds: Int64 = 0
    var maxNanoseconds: Int64 = 0

    mutating func add(_ nanoseconds: Int64) {
        count += 1
        sumNanoseconds = sumNanoseconds.addingReportingOverflow(nanoseconds).overflow ? .max : sumNanoseconds + nanoseconds
        maxNanoseconds = max(maxNanoseconds, nanoseconds)
    }

    /// Mean and max in milliseconds; nil without a latency.
    var milliseconds: (mean: Double, max: Double)? {
        count == 0 ? nil : (Double(sumNanoseconds) / Double(count) / 1e6, Double(maxNanoseconds) / 1e6)
    }
}

/// Forwards to the factory's timer and adds to the latency window the status report reads.
private final class ReadBackTimer: TimerHandler, Sendable {
    let exported: any TimerHandler
    let readBack: StageMetrics.ReadBack
    init(_ exported: any TimerHandler, readBack: StageMetrics.ReadBack) {
        self.exported = exported
        self.readBack = readBack
    }
    func recordNanoseconds(_ duration: Int64) {
        readBack.latency.withLock { $0.add(duration) }
        exported.recordNanoseconds(duration)
    }
}
