import Foundation
import Synchronization
import Logging
import Metrics
import Workers
import Kafka

/// Outputs of one partition on their way: what was submitted, for which inputs, and the offset
/// that may be stored once all of it (and everything submitted before it) is delivered.
struct Pending: Sendable {
    var records: [ProducerRecord]
    /// Per record, the index in `inputs` of the input that produced it; -1 for records that
    /// belong to no single input (dead letters, checkpoints, `advance` outputs).
    var sources: [Int32]
    var inputs: [InputRecord]
    var ticket: DeliveryTicket
    /// Stored for commit once settled (the next offset to read per input partition); empty
    /// stores nothing.
    var storeOffsets: [TopicPartitionOffset]
    /// Inputs this settles (for the counters).
    var inputCount: Int
    var bytes: Int
    /// Records counted in flight by ``Backpressure`` for this (`records.count`, or one per input
    /// of a concurrent stage, counted before its outputs existed).
    var heldRecords: Int

    /// `sources` value of a record that belongs to no single input.
    static let noInput: Int32 = -1
    /// `sources` value of a checkpoint record (not counted as an output).
    static let checkpointRecord: Int32 = -2

    init(
        records: [ProducerRecord], sources: [Int32], inputs: [InputRecord], ticket: DeliveryTicket, storeOffsets: [TopicPartitionOffset],
        inputCount: Int, bytes: Int, heldRecords: Int? = nil
    ) {
        self.records = records
        self.sources = sources
        self.inputs = inputs
        self.ticket = ticket
        self.storeOffsets = storeOffsets
        self.inputCount = inputCount
        self.bytes = bytes
        self.heldRecords = heldRecords ?? records.count
    }
}

/// One assigned input partition (or, for a stage that joins co-partitioned inputs, the same
/// partition number of each input topic): its stage state (touched only by the service's event
/// loop) and the task that settles its outputs in order.
///
/// Order is per lane: outputs are submitted in input order, settled in submission order, and
/// an offset is stored only after every earlier output of the lane is delivered (or its input
/// dead-lettered). Lanes settle independently, so a slow partition does not hold back the
/// others' commits.
final class PartitionLane {
    /// The lane's identity: the input partition, or `a+b` and the partition number for joined
    /// inputs (the changelog key).
    let id: TopicPartition
    /// The ordered stage's copy for this lane; nil for a concurrent stage.
    var runner: StageRunner?
    /// Per input partition: the offset after the last input folded into the state (or whose
    /// outputs were submitted).
    var next: [TopicPartition: Int64] = [:]
    /// Per input partition: inputs below this offset are already in the restored state: skipped.
    var skipBelow: [TopicPartition: Int64] = [:]
    /// The offsets of a restored checkpoint, not stored yet (see `StageLoop.storeRestoredOffsets`).
    var restoredOffsets: [TopicPartitionOffset] = []
    /// The state changed since the last checkpoint.
    var dirty = false
    var lastCheckpoint = ContinuousClock.now
    /// Exactly-once: per input partition, the offsets committed with the last transaction.
    var committedNext: [TopicPartition: Int64] = [:]
    /// Exactly-once, after an abort rewound a partition: records above this offset were fetched
    /// before the seek and are dropped until the re-read reaches the partition again.
    var staleAbove: [TopicPartition: Int64] = [:]
    /// Timestamp of the last input processed (for the lag in seconds).
    var lastTimestamp: Int64 = 0
    var lagGauges: [TopicPartition: (records: Gauge, seconds: Gauge)] = [:]
    private let queue: AsyncStream<Work>.Continuation
    private let settler: Task<Void, Never>
    /// Concurrent stage: the latest task per record key, so that a key's outputs are submitted in
    /// input order. Entries of settled tasks are dropped as the map grows.
    private var lastByKey: [[UInt8]: (sequence: Int, task: Task<Pending?, Never>)] = [:]
    private var enqueued = 0
    /// Works settled so far (the settler counts, `enqueue` reads).
    private final class SettledCount: Sendable { let value = Atomic<Int>(0) }
    private let settledCount = SettledCount()

    enum Work: Sendable {
        case submitted(Pending)
        /// A concurrent stage's record: its task submits the outputs (nil if the producer closed).
        case running(Task<Pending?, Never>)
        /// Resumed once everything enqueued before it is settled.
        case barrier(CheckedContinuation<Void, Never>)
    }

    init(id: TopicPartition, runner: StageRunner?, settle: @escaping @Sendable (Pending) async -> Void) {
        self.id = id
        self.runner = runner
        let (stream, continuation) = AsyncStream<Work>.makeStream()
        queue = continuation
        let settled = settledCount
        settler = Task {
            // Once a task could not submit (the producer closed), no later offset is stored:
            // it would skip that input.
            var broken = false
            for await work in stream {
                switch work {
                case .submitted(var pending):
                    if broken { pending.storeOffsets = [] }
                    await settle(pending)
                case .running(let task):
                    if var pending = await task.value {
                        if broken { pending.storeOffsets = [] }
                        await settle(pending)
                    } else {
                        broken = true
                    }
                case .barrier(let continuation):
                    continuation.resume()
                    continue
                }
                settled.value.add(1, ordering: .releasing)
            }
        }
    }

    func enqueue(_ pending: Pending) {
        enqueued += 1
        queue.yield(.submitted(pending))
    }

    /// The task of the latest record with this key that may still be submitting.
    func lastTask(forKey key: [UInt8]?) -> Task<Pending?, Never>? { lastByKey[key ?? []]?.task }

    func enqueue(_ task: Task<Pending?, Never>, key: [UInt8]?) {
        enqueued += 1
        if lastByKey.count >= 4096 {
            let settled = settledCount.value.load(ordering: .acquiring)
            lastByKey = lastByKey.filter { $0.value.sequence > settled }
        }
        lastByKey[key ?? []] = (enqueued, task)
        queue.yield(.running(task))
    }

    /// Waits until everything enqueued so far is settled; the lane goes on taking work.
    func settled() async {
        await withCheckedContinuation { continuation in
            if case .terminated = queue.yield(.barrier(continuation)) { continuation.resume() }
        }
    }

    /// Drops the records of a rewound partition that were fetched before the rewind (see
    /// ``staleAbove``): they follow what was processed, the re-read starts at or before it.
    func droppingStale(_ records: ArraySlice<ConsumerRecord>) -> ArraySlice<ConsumerRecord> {
        guard let tp = records.first?.topicPartition, let limit = staleAbove[tp] else { return records }
        guard let resumed = records.firstIndex(where: { $0.offset <= limit }) else { return records[records.endIndex...] }
        staleAbove[tp] = nil
        return records[resumed...]
    }

    /// Waits until everything enqueued is settled; the lane takes nothing more.
    func finish() async {
        queue.finish()
        await settler.value
    }
}

/// Settles a partition's outputs: waits for their delivery, retries failures with backoff while
/// the partition is paused, dead-letters inputs whose outputs still fail after the attempts,
/// and stores the offset. Never skips: records that belong to no single input (dead letters,
/// checkpoints) are retried until delivered or the worker stops.
struct Settler: Sendable {
    let stageName: String
    let deadLetterTopic: String
    let retry: Topology.RetryPolicy
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let backpressure: Backpressure
    let counters: StageCounters
    let metrics: StageMetrics
    let logLimiter: LogRateLimiter
    let logger: Logger
    /// Exactly-once: a failed delivery is not retried here; it dooms the open transaction,
    /// which the loop aborts and re-runs from its first input.
    let transaction: TransactionFailures?

    /// Outputs per topic, dead letters per reason, and the end-to-end latency of the newest input.
    private func observeDelivered(_ records: [ProducerRecord], sources: [Int32], inputs: [InputRecord]) {
        // Outputs come in runs of one topic: counted per run, not looked up per record.
        var run: (topic: String, count: Int64)?
        for (record, source) in zip(records, sources) where source != Pending.checkpointRecord {
            if record.topic == deadLetterTopic {
                let reason = record.headers.last { $0.key == DeadLetterHeader.reason }?.value.map { String(decoding: $0, as: UTF8.self) } ?? "unknown"
                metrics.deadLetters(reason: reason).increment()
            } else if run?.topic == record.topic {
                run!.count += 1
            } else {
                if let run { metrics.recordsOut(topic: run.topic).increment(by: run.count) }
                run = (record.topic, 1)
            }
        }
        if let run { metrics.recordsOut(topic: run.topic).increment(by: run.count) }
        if let newest = inputs.last?.timestamp, newest > 0 {
            let ms = Int64(Date().timeIntervalSince1970 * 1000) - newest
            if ms >= 0 { metrics.endToEndLatency.recordMilliseconds(ms) }
        }
    }

    /// - Parameter partitions: the lane's input partitions (paused together while retrying).
    func settle(_ pending: Pending, partitions: [TopicPartition]) async {
        let tp = partitions.count == 1 ? "\(partitions[0])" : "\(partitions)"
        var records = pending.records
        var sources = pending.sources
        var reports = await pending.ticket.reports()
        var attempt = 1
        var firstFailure: Int64?
        var paused = false
        var delivered = 0, deadLettered = 0
        while true {
            var failed: [Int] = []
            for i in reports.indices {
                if reports[i].error != nil {
                    failed.append(i)
                } else if records[i].topic == deadLetterTopic {
                    deadLettered += 1
                } else if sources[i] != Pending.checkpointRecord {
                    delivered += 1
                }
            }
            if failed.isEmpty { break }
            let error = reports[failed[0]].error!
            if let transaction {
                transaction.record(error)
                metrics.deliveryErrors.increment(by: Int64(failed.count))
                break
            }
            firstFailure = firstFailure ?? Int64(Date().timeIntervalSince1970 * 1000)
            counters.retries.add(1)
            metrics.retries.increment()
            metrics.deliveryErrors.increment(by: Int64(failed.count))
            var again: [ProducerRecord] = []
            var againSources: [Int32] = []
            if attempt >= retry.attempts {
                // The budget is spent: each input whose outputs failed goes to the dead-letter
                // topic once, with the error; what belongs to no input is retried on.
                var dead = Set<Int32>()
                for i in failed {
                    if sources[i] >= 0 && records[i].topic != deadLetterTopic {
                        dead.insert(sources[i])
                    } else {
                        again.append(records[i])
                        againSources.append(sources[i])
                    }
                }
                for s in dead.sorted() {
                    let letter = DeadLetter(
                        stage: stageName, input: pending.inputs[Int(s)],
                        failure: DecodeFailure(field: "$", reason: .deliveryFailed, detail: "\(error)"),
                        errorCode: error.rdKafkaCode.map(String.init) ?? error.code.rawValue, attempts: attempt,
                        firstFailure: firstFailure)
                    again.append(RecordMapping.deadLetter(letter, topic: deadLetterTopic))
                    againSources.append(-1)
                }
                if dead.isEmpty {
                    logger.warning(
                        "dead letters or checkpoints still undelivered, retrying", metadata: ["partition": "\(tp)", "attempt": "\(attempt)", "error": "\(error)"])
                } else {
                    logger.error(
                        "delivery failed after \(attempt) attempts; inputs go to the dead-letter topic",
                        metadata: ["partition": "\(tp)", "error": "\(error)", "inputs": "\(dead.count)"])
                }
            } else {
                for i in failed {
                    again.append(records[i])
                    againSources.append(sources[i])
                }
                if let suppressed = logLimiter.admit("retry") {
                    logger.warning(
                        "delivery failed, retrying",
                        metadata: ["partition": "\(tp)", "attempt": "\(attempt)", "error": "\(error)", "suppressed-before": "\(suppressed)"])
                }
            }
            if !paused {
                paused = true
                for p in partitions { backpressure.beginRetry(p) }
                try? consumer.pause(partitions)
                counters.pausedPartitions.add(1)
            }
            attempt += 1
            try? await Task.sleep(for: retry.backoff(beforeAttempt: min(attempt, 30)))
            guard let ticket = try? await producer.submit(again) else {
                logger.error("producer closed while retrying; the partition's offsets stay uncommitted", metadata: ["partition": "\(tp)"])
                return
            }
            records = again
            sources = againSources
            reports = await ticket.reports()
        }
        if paused {
            counters.pausedPartitions.add(-1)
            let resumable = partitions.filter { backpressure.endRetry($0) }
            if !resumable.isEmpty { try? consumer.resume(resumable) }
        }
        if !pending.storeOffsets.isEmpty {
            do {
                try consumer.store(offsets: pending.storeOffsets)
            } catch {
                // Revoked or lost meanwhile: the next owner reads from the last commit (at least once).
                logger.info("offset not stored (partition no longer assigned)", metadata: ["partition": "\(tp)", "error": "\(error)"])
            }
        }
        counters.inputsDone.add(pending.inputCount)
        counters.lastSettled.withLock { $0 = .now }
        counters.produced.add(delivered)
        counters.deadLettered.add(deadLettered)
        observeDelivered(records, sources: sources, inputs: pending.inputs)
        let consumer = self.consumer
        backpressure.remove(records: pending.heldRecords, bytes: pending.bytes) { retrying in
            if let assigned = try? consumer.assignment() { try? consumer.resume(assigned.filter { !retrying.contains($0) }) }
        }
    }
}
