import Foundation
import Kafka
import Metrics
import Workers

/// The one place where what a stage did is counted: each method moves the stage's metrics
/// (``StageMetrics``), the one store of those counts. Tests read them through the metrics
/// factory they pass in; the worker reads back the few totals it reports about itself
/// (``progress``).
struct StageRecorder: Sendable {
    let metrics: StageMetrics

    init(stage: String, factory: any MetricsFactory) {
        self.metrics = StageMetrics(stage: stage, factory: factory)
    }

    /// What the worker reports about itself (its status report, its summary).
    var progress: StageProgress {
        let r = metrics.readBack
        let active: Double
        if let first = r.firstProcessed.withLock({ $0 }), let last = r.lastSettled.withLock({ $0 }), last > first {
            active = (last - first).asSeconds
        } else {
            active = 0
        }
        return StageProgress(
            processed: r.processed.value, inputsSettled: r.inputsSettled.value, produced: r.produced.value,
            deadLettered: r.deadLettered.value, inFlightRecords: r.inFlightRecords.value,
            activeSeconds: active, loopBusySeconds: r.loopBusy.value, errors: r.errors.value,
            producedByTopic: r.producedByTopic.withLock { $0.mapValues(\.value) })
    }

    /// The mean and largest end-to-end latency (ms) since the last call; nil when none was recorded.
    func takeLatency() -> (mean: Double, max: Double)? {
        metrics.readBack.latency.withLock { window in
            defer { window = LatencyWindow() }
            return window.milliseconds
        }
    }

    // MARK: The loop

    /// Inputs handed to the stage (one batch of one partition, or the records a concurrent
    /// stage started), and how long the ordered stage took over them.
    func processed(_ count: Int, startedAt started: ContinuousClock.Instant, took: Duration?) {
        guard count > 0 else { return }
        if metrics.readBack.processed.value == 0 { metrics.readBack.firstProcessed.withLock { $0 = $0 ?? started } }
        metrics.recordsIn.increment(by: Int64(count))
        if let took { metrics.batchProcessing.record(duration: took) }
    }

    /// One record of a concurrent stage took this long.
    func concurrentRecordTook(_ duration: Duration) { metrics.batchProcessing.record(duration: duration) }

    func loopTurned(busy: Duration) { metrics.loopBusy.increment(by: busy.asSeconds) }

    func rebalanced(assigned: Int) {
        metrics.rebalances.increment()
        metrics.assignedPartitions.record(assigned)
    }

    func restored() { metrics.restoredPartitions.increment() }

    /// The in-flight bound was just crossed: the worker waits for deliveries before it takes more input.
    func boundReached() { metrics.backpressureWaits.increment() }

    func commitFailed() { metrics.commitFailures.increment() }

    func transactionCommitted() { metrics.transactionsCommitted.increment() }

    /// An aborted transaction and what was delivered in it (hidden from `read_committed` readers).
    func transactionAborted(outputs: Int, deadLetters: Int) {
        metrics.transactionsAborted.increment()
        metrics.abortedOutputs.increment(by: Int64(outputs))
        metrics.abortedDeadLetters.increment(by: Int64(deadLetters))
    }

    /// Once per tick: queue depths and librdkafka's view.
    func observed(producerQueue: Int, inFlightRecords: Int, consumer: KafkaStatistics?, producer: KafkaStatistics?, group: String) {
        metrics.producerQueue.record(producerQueue)
        metrics.inFlightRecords.record(inFlightRecords)
        metrics.pausedPartitions.record(pausedLanes.value)
        if let consumer {
            metrics.fetchedRecords.record(consumer.receivedMessages)
            StageMetrics.report(consumer, group: group)
        }
        if let producer { StageMetrics.report(producer, group: nil) }
    }

    // MARK: Settlement queues

    /// Records of one attempt failed; `retrying` unless they doom a transaction.
    func deliveryFailed(records: Int, retrying: Bool) {
        metrics.deliveryErrors.increment(by: Int64(records))
        if retrying { metrics.retries.increment() }
    }

    /// Outputs that had landed ahead of an earlier output's retry, sent again after it.
    func resent(records: Int) { metrics.resent.increment(by: Int64(records)) }

    /// Lanes paused while their deliveries are retried (the paused-partitions gauge, recorded
    /// once per tick).
    private let pausedLanes = Total()

    func pausedForRetry(_ delta: Int) { pausedLanes.add(delta) }

    /// Checkpoints taken and not yet durable (or dropped) changed by `delta`: they wait for every
    /// output before them.
    func checkpointsWaiting(_ delta: Int) {
        waitingCheckpoints.add(delta)
        metrics.checkpointsWaiting.record(waitingCheckpoints.value)
    }

    /// Checkpoints taken and not yet durable (the checkpoints-waiting gauge, recorded as it changes).
    private let waitingCheckpoints = Total()

    /// A checkpoint was delivered.
    func checkpointed() { metrics.checkpoints.increment() }

    /// A stretch of a partition is settled: `delivered` holds every record delivered for it,
    /// whichever attempt delivered it; `newestInput` is the timestamp of its newest input.
    func settled(inputs: Int, delivered: DeliveredRecords, newestInput: Int64?) {
        if inputs > 0 { metrics.inputsSettled.increment(by: Int64(inputs)) }
        metrics.readBack.lastSettled.withLock { $0 = .now }
        for (topic, count) in delivered.outputsByTopic { metrics.recordsOut(topic: topic).increment(by: Int64(count)) }
        for (reason, count) in delivered.deadLettersByReason { metrics.deadLetters(reason: reason).increment(by: Int64(count)) }
        if let newest = newestInput, newest > 0 {
            let ms = Int64(Date().timeIntervalSince1970 * 1000) - newest
            if ms >= 0 { metrics.endToEndLatency.recordMilliseconds(ms) }
        }
    }
}

/// What a worker reports about itself, read back from its metrics (``StageRecorder/progress``).
public struct StageProgress: Sendable {
    /// Inputs handed to the stage (skipped restored ones not included).
    public var processed: Int
    /// Inputs whose outputs and dead letters are all delivered.
    public var inputsSettled: Int
    /// Outputs delivered (dead letters and checkpoints not included).
    public var produced: Int
    public var deadLettered: Int
    /// Records taken in and not yet settled, as of the last tick.
    public var inFlightRecords: Int
    /// Seconds from the first processed input to the last settled output (0 before both).
    public var activeSeconds: Double
    /// Seconds the event loop was busy (the rest it waited for events).
    public var loopBusySeconds: Double
    /// Failed delivery attempts and failed commits.
    public var errors: Int = 0
    /// Outputs delivered per topic.
    public var producedByTopic: [String: Int] = [:]
}

/// What was delivered for one entry of a settlement queue, over all its attempts.
struct DeliveredRecords {
    private(set) var outputs = 0
    private(set) var deadLetters = 0
    /// Outputs come in runs of one topic: counted per run, not looked up per record.
    private(set) var outputsByTopic: [(String, Int)] = []
    private(set) var deadLettersByReason: [String: Int] = [:]
    /// The batch's number of the topic of the last run (``ProducerBatch/topicNumber(of:)``).
    private var lastTopicNumber: Int32 = -1

    /// A pass over another batch begins: its topic numbers are its own.
    mutating func beginPass() { lastTopicNumber = -1 }

    /// Record `index` of `batch` (topic number `number`) was delivered as an output: its topic's
    /// name is read only when a run of another topic begins. Every call between two
    /// ``beginPass()`` is about the same batch.
    mutating func output(topicNumber number: Int32, of batch: ProducerBatch, at index: Int) {
        outputs += 1
        if number != lastTopicNumber {
            lastTopicNumber = number
            let topic = batch.topic(index)
            if outputsByTopic.last?.0 != topic {
                outputsByTopic.append((topic, 0))
            }
        }
        outputsByTopic[outputsByTopic.count - 1].1 += 1
    }

    /// A dead letter delivered, with the value of its reason header.
    mutating func deadLetter(reason: [UInt8]?) {
        deadLetters += 1
        let reason = reason.map { String(decoding: $0, as: UTF8.self) } ?? "unknown"
        deadLettersByReason[reason, default: 0] += 1
    }
}
