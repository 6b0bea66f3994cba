import Metrics
import Kafka

/// Every metric a worker exports, named once. Prometheus names (through swift-prometheus):
///
/// | metric | type | labels |
/// | --- | --- | --- |
/// | `pipeline_records_in_total` | counter | stage |
/// | `pipeline_records_out_total` | counter | stage, topic |
/// | `pipeline_dead_letters_total` | counter | stage, reason |
/// | `pipeline_batch_processing_seconds` | histogram | stage |
/// | `pipeline_end_to_end_latency_seconds` | histogram | stage |
/// | `pipeline_consumer_lag_records`, `pipeline_consumer_lag_seconds` | gauge | stage, topic, partition |
/// | `pipeline_rebalances_total`, `pipeline_commit_failures_total`, `pipeline_delivery_retries_total`, `pipeline_delivery_errors_total` | counter | stage |
/// | `pipeline_paused_partitions`, `pipeline_assigned_partitions`, `pipeline_producer_queue_messages`, `pipeline_in_flight_records` | gauge | stage |
/// | `pipeline_checkpoints_total` | counter | stage |
/// | `pipeline_backpressure_waits_total` | counter | stage (times the in-flight bound was reached and the worker waited for deliveries before taking more input) |
/// | `pipeline_loop_busy_seconds_total` | counter | stage (time the event loop spent handling records and events: a rate near 1 means the loop is the limit; add workers) |
/// | `kafka_consumergroup_group_lag`, `kafka_consumergroup_group_offset`, `kafka_partition_latest_offset` | gauge | group, topic, partition (kafka-lag-exporter names, from librdkafka statistics) |
/// | `kafka_client_broker_rtt_seconds` | gauge | client, broker (librdkafka statistics, average round trip) |
public enum MetricName {
    public static let recordsIn = "pipeline_records_in_total"
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
    public static let pausedPartitions = "pipeline_paused_partitions"
    public static let assignedPartitions = "pipeline_assigned_partitions"
    public static let producerQueue = "pipeline_producer_queue_messages"
    public static let inFlightRecords = "pipeline_in_flight_records"
    public static let checkpoints = "pipeline_checkpoints_total"
    public static let backpressureWaits = "pipeline_backpressure_waits_total"
    public static let transactions = "pipeline_transactions_total"
    public static let loopBusy = "pipeline_loop_busy_seconds_total"
    public static let groupLag = "kafka_consumergroup_group_lag"
    public static let groupOffset = "kafka_consumergroup_group_offset"
    public static let latestOffset = "kafka_partition_latest_offset"
    public static let brokerRTT = "kafka_client_broker_rtt_seconds"

    /// Every name above (the dashboard and alert tests check their queries against these).
    public static let all = [
        recordsIn, recordsOut, deadLetters, batchProcessing, endToEndLatency, lagRecords, lagSeconds, rebalances,
        commitFailures, retries, deliveryErrors, pausedPartitions, assignedPartitions, producerQueue, inFlightRecords,
        checkpoints, backpressureWaits, transactions, loopBusy, groupLag, groupOffset, latestOffset, brokerRTT,
    ]
}

/// A stage's metric handles, made once (the swift-metrics factory is consulted per handle, not
/// per record); per-topic and per-partition handles are cached where they are used.
struct StageMetrics: Sendable {
    let stage: String
    let factory: any MetricsFactory
    let recordsIn: Counter
    let batchProcessing: Metrics.Timer
    let endToEndLatency: Metrics.Timer
    let rebalances: Counter
    let commitFailures: Counter
    let retries: Counter
    let deliveryErrors: Counter
    let checkpoints: Counter
    let backpressureWaits: Counter
    /// Seconds the event loop was busy (not waiting for the next event).
    let loopBusy: FloatingPointCounter
    /// Exactly-once transactions by outcome (0 for an at-least-once stage).
    let transactionsCommitted: Counter
    let transactionsAborted: Counter
    let pausedPartitions: Gauge
    let assignedPartitions: Gauge
    let producerQueue: Gauge
    let inFlightRecords: Gauge

    init(stage: String, factory: any MetricsFactory = MetricsSystem.factory) {
        self.stage = stage
        self.factory = factory
        let d = [("stage", stage)]
        recordsIn = Counter(label: MetricName.recordsIn, dimensions: d, factory: factory)
        batchProcessing = Metrics.Timer(label: MetricName.batchProcessing, dimensions: d, factory: factory)
        endToEndLatency = Metrics.Timer(label: MetricName.endToEndLatency, dimensions: d, factory: factory)
        rebalances = Counter(label: MetricName.rebalances, dimensions: d, factory: factory)
        commitFailures = Counter(label: MetricName.commitFailures, dimensions: d, factory: factory)
        retries = Counter(label: MetricName.retries, dimensions: d, factory: factory)
        deliveryErrors = Counter(label: MetricName.deliveryErrors, dimensions: d, factory: factory)
        checkpoints = Counter(label: MetricName.checkpoints, dimensions: d, factory: factory)
        backpressureWaits = Counter(label: MetricName.backpressureWaits, dimensions: d, factory: factory)
        loopBusy = FloatingPointCounter(label: MetricName.loopBusy, dimensions: d, factory: factory)
        transactionsCommitted = Counter(label: MetricName.transactions, dimensions: d + [("outcome", "committed")], factory: factory)
        transactionsAborted = Counter(label: MetricName.transactions, dimensions: d + [("outcome", "aborted")], factory: factory)
        pausedPartitions = Gauge(label: MetricName.pausedPartitions, dimensions: d, factory: factory)
        assignedPartitions = Gauge(label: MetricName.assignedPartitions, dimensions: d, factory: factory)
        producerQueue = Gauge(label: MetricName.producerQueue, dimensions: d, factory: factory)
        inFlightRecords = Gauge(label: MetricName.inFlightRecords, dimensions: d, factory: factory)
    }

    func recordsOut(topic: String) -> Counter {
        Counter(label: MetricName.recordsOut, dimensions: [("stage", stage), ("topic", topic)], factory: factory)
    }

    func deadLetters(reason: String) -> Counter {
        Counter(label: MetricName.deadLetters, dimensions: [("stage", stage), ("reason", reason)], factory: factory)
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
