import Foundation
import Kafka
import Metrics
import Workers

/// The one place where what a stage did is counted: each method moves the counter that tests
/// and the demo read (``StageCounters``) and the exported metric (``StageMetrics``) together,
/// so that the two cannot drift.
struct StageRecorder: Sendable {
    let counters: StageCounters
    let metrics: StageMetrics

    init(stage: String, counters: StageCounters, factory: any MetricsFactory) {
        self.counters = counters
        self.metrics = StageMetrics(stage: stage, factory: factory)
    }

    // MARK: The loop

    /// Inputs handed to the stage (one batch of one partition, or the records a concurrent
    /// stage started), and how long the ordered stage took over them.
    func processed(_ count: Int, startedAt started: ContinuousClock.Instant, took: Duration?) {
        guard count > 0 else { return }
        if counters.processed.value == 0 { counters.firstProcessed.withLock { $0 = $0 ?? started } }
        counters.processed.add(count)
        metrics.recordsIn.increment(by: Int64(count))
        if let took { metrics.batchProcessing.record(duration: took) }
    }

    /// One record of a concurrent stage took this long.
    func concurrentRecordTook(_ duration: Duration) { metrics.batchProcessing.record(duration: duration) }

    func loopTurned(busy: Duration) {
        counters.loopBusy.withLock { $0 += busy }
        metrics.loopBusy.increment(by: busy.asSeconds)
    }

    func rebalanced(assigned: Int) {
        counters.rebalances.add(1)
        metrics.rebalances.increment()
        metrics.assignedPartitions.record(assigned)
    }

    func restored() { counters.restoredPartitions.add(1) }

    /// The in-flight bound was just crossed: the worker waits for deliveries before it takes more input.
    func boundReached() {
        counters.backpressureWaits.add(1)
        metrics.backpressureWaits.increment()
    }

    func commitFailed() {
        counters.commitFailures.add(1)
        metrics.commitFailures.increment()
    }

    func transactionCommitted() {
        counters.transactionsCommitted.add(1)
        metrics.transactionsCommitted.increment()
    }

    /// An aborted transaction and what was delivered in it (hidden from `read_committed` readers).
    func transactionAborted(outputs: Int, deadLetters: Int) {
        counters.transactionsAborted.add(1)
        counters.abortedOutputs.add(outputs)
        counters.abortedDeadLetters.add(deadLetters)
        metrics.transactionsAborted.increment()
    }

    /// Once per tick: queue depths and librdkafka's view.
    func observed(producerQueue: Int, inFlightRecords: Int, consumer: KafkaStatistics?, producer: KafkaStatistics?, group: String) {
        metrics.producerQueue.record(producerQueue)
        metrics.inFlightRecords.record(inFlightRecords)
        counters.inFlightRecords.store(inFlightRecords, ordering: .relaxed)
        metrics.pausedPartitions.record(counters.pausedPartitions.value)
        if let consumer {
            counters.fetchedRecords.store(Int(consumer.receivedMessages), ordering: .relaxed)
            StageMetrics.report(consumer, group: group)
        }
        if let producer { StageMetrics.report(producer, group: nil) }
    }

    // MARK: Settlement queues

    /// Records of one attempt failed; `retrying` unless they doom a transaction.
    func deliveryFailed(records: Int, retrying: Bool) {
        metrics.deliveryErrors.increment(by: Int64(records))
        if retrying {
            counters.retries.add(1)
            metrics.retries.increment()
        }
    }

    func pausedForRetry(_ delta: Int) { counters.pausedPartitions.add(delta) }

    /// A checkpoint was delivered.
    func checkpointed() {
        counters.checkpoints.add(1)
        metrics.checkpoints.increment()
    }

    /// A stretch of a partition is settled: `delivered` holds every record delivered for it,
    /// whichever attempt delivered it; `newestInput` is the timestamp of its newest input.
    func settled(inputs: Int, delivered: DeliveredRecords, newestInput: Int64?) {
        counters.inputsDone.add(inputs)
        counters.lastSettled.withLock { $0 = .now }
        counters.produced.add(delivered.outputs)
        counters.deadLettered.add(delivered.deadLetters)
        for (topic, count) in delivered.outputsByTopic { metrics.recordsOut(topic: topic).increment(by: Int64(count)) }
        for (reason, count) in delivered.deadLettersByReason { metrics.deadLetters(reason: reason).increment(by: Int64(count)) }
        if let newest = newestInput, newest > 0 {
            let ms = Int64(Date().timeIntervalSince1970 * 1000) - newest
            if ms >= 0 { metrics.endToEndLatency.recordMilliseconds(ms) }
        }
    }
}

/// What was delivered for one entry of a settlement queue, over all its attempts.
struct DeliveredRecords {
    private(set) var outputs = 0
    private(set) var deadLetters = 0
    /// Outputs come in runs of one topic: counted per run, not looked up per record.
    private(set) var outputsByTopic: [(String, Int)] = []
    private(set) var deadLettersByReason: [String: Int] = [:]

    mutating func output(topic: String) {
        outputs += 1
        if let last = outputsByTopic.indices.last, outputsByTopic[last].0 == topic {
            outputsByTopic[last].1 += 1
        } else {
            outputsByTopic.append((topic, 1))
        }
    }

    /// A dead letter delivered, with the value of its reason header.
    mutating func deadLetter(reason: [UInt8]?) {
        deadLetters += 1
        let reason = reason.map { String(decoding: $0, as: UTF8.self) } ?? "unknown"
        deadLettersByReason[reason, default: 0] += 1
    }
}
