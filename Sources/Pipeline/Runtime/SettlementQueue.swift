import Foundation
import Kafka
import Logging
import Synchronization
import Workers

/// What one input partition (a lane) owes the broker, in input order: the outputs and dead
/// letters of each stretch of input, its checkpoints, its offsets. One task (a child of the
/// worker's task group, through ``Context/tasks``) settles the entries strictly in order, and
/// nothing behind an entry that is not settled becomes durable:
///
/// - a delivery is settled when every record of it is acknowledged (failed ones retried with
///   backoff while the lane's partitions are paused; outputs that keep failing, or fail for
///   good, dead-lettered as themselves). Later outputs of the lane that landed on the partition
///   of a retried one before the retry are sent again after it (``ResendFence``): a key's last
///   copies come in input order;
/// - a checkpoint is handed to the producer only when everything before it is acknowledged, and
///   the next one only when it is: the changelog never holds a state whose outputs are not
///   delivered, and its last record is always the newest state;
/// - offsets (of a delivery, a checkpoint, or a restored checkpoint) go to the delivery
///   guarantee only when everything before them is settled: stored for the next commit (at least
///   once) or sent with the transaction (exactly once).
///
/// A record that can never be delivered and belongs to no input (a checkpoint or a dead letter
/// larger than `message.max.bytes`, say) stops the worker with the reason; the lane settles
/// nothing after it. Cancelled (the worker's shutdown ran past its deadline), the task stops
/// waiting at once, and nothing it had not settled becomes durable.
final class SettlementQueue: Sendable {
    /// Records handed to the producer for a stretch of input (or an `advance`).
    struct Delivery: Sendable {
        var records: ProducerBatch
        /// Per record, the index in `inputs` of the input it is an output of; ``noInput`` for a
        /// record that belongs to no single input (a dead letter, an `advance` output),
        /// ``checkpoint`` for a checkpoint.
        var sources: [Int32]
        var inputs: [InputRecord]
        var ticket: DeliveryTicket?
        /// The next input offsets once this is settled; empty: none (a stateful lane's offsets
        /// come with its checkpoints).
        var offsets: [TopicPartitionOffset]
        /// Inputs this settles (for the metrics).
        var inputCount: Int
        /// Counted in flight by ``Backpressure``.
        var heldRecords: Int
        var heldBytes: Int

        static let noInput: Int32 = -1
        static let checkpoint: Int32 = -2
    }

    enum Entry: Sendable {
        case delivery(Delivery)
        /// A concurrent stage's record: its task runs the stage, submits the outputs and sets
        /// the delivery (one without a ticket if the producer was closed).
        case running(Promise<Delivery>)
        /// A checkpoint record and the input offsets its state covers; handed to the producer
        /// when it reaches the head of the queue.
        case checkpoint(ProducerRecord, offsets: [TopicPartitionOffset])
        /// Input offsets alone (those of a restored checkpoint).
        case offsets([TopicPartitionOffset])
        /// Its waiter (in ``Barriers``) is resumed once everything enqueued before it is settled.
        case barrier(Int)
    }

    /// What the settlement task needs, for every lane alike.
    struct Context: Sendable {
        /// The stage (topology name) and the transform or chain it runs, for dead letters.
        let stageName: String
        let transformName: String
        let deadLetterTopic: String
        let retry: Topology.RetryPolicy
        let consumer: KafkaConsumer
        let producer: KafkaProducer
        let backpressure: Backpressure
        let guarantee: any DeliveryGuarantee
        let recorder: StageRecorder
        /// Checkpoints wait while this worker may have lost its partitions unawares.
        let membership: MembershipGate
        let logLimiter: LogRateLimiter
        let logger: Logger
        /// What the broker acknowledged, written down for a verifier (nil: not written).
        var acknowledgements: AcknowledgementLog? = nil
        /// Stops the worker: something can never be settled.
        let fail: @Sendable (WorkerError) -> Void
        /// Where the settlement task runs: the worker's task group.
        let tasks: ChildTasks
    }

    private let queue: AsyncStream<Entry>.Continuation
    /// The settlement task has ended.
    private let ended = OneShotEvent()
    private let barriers = Barriers()
    private let recorder: StageRecorder
    /// Entries settled so far (the task counts, the loop reads).
    private final class Count: Sendable { let value = Atomic<Int>(0) }
    private let settledCount = Count()
    /// The partitions were lost: what is left is delivered, nothing more becomes durable.
    private final class Flag: Sendable { let value = Atomic<Bool>(false) }
    private let abandoned = Flag()

    /// - Parameter partitions: the lane's input partitions (paused together while retrying).
    init(partitions: [TopicPartition], context: Context) {
        let (stream, continuation) = AsyncStream<Entry>.makeStream()
        queue = continuation
        recorder = context.recorder
        let settled = settledCount
        let abandoned = abandoned
        let settler = Settler(partitions: partitions, context: context)
        let ended = self.ended
        let barriers = self.barriers
        let started = context.tasks.start {
            defer {
                // Ended (or cancelled): it takes nothing more, and nobody waits on it in vain.
                continuation.finish()
                barriers.resumeAll()
                ended.fire()
            }
            // Once something could not be settled, nothing after it becomes durable: it would
            // skip that input.
            var broken = false
            // The offsets of the lane's last durable checkpoint (or restored state): committed
            // again before the next checkpoint, as proof of ownership.
            var covered: [TopicPartitionOffset] = []
            var fence = ResendFence()
            for await entry in stream {
                if abandoned.value.load(ordering: .relaxed) { broken = true }
                switch entry {
                case .barrier(let id):
                    barriers.resume(id)
                    continue
                case .delivery(let delivery):
                    if !(await settler.settle(delivery, durable: !broken, fence: &fence)) { broken = true }
                case .running(let promise):
                    guard let delivery = await promise.value() else { return }
                    if !(await settler.settle(delivery, durable: !broken, fence: &fence)) { broken = true }
                case .checkpoint(let record, let offsets):
                    defer { context.recorder.checkpointsWaiting(-1) }
                    if !broken {
                        // Not once this worker has lost the partition (nor while it may have
                        // unawares, nor once the coordinator says another member has it): its
                        // state is older than the new owner's.
                        await context.membership.waitUntilSure()
                        if Task.isCancelled || abandoned.value.load(ordering: .relaxed) || context.consumer.wasLost(partitions) {
                            broken = true
                        } else {
                            switch await settler.checkpoint(record, offsets: offsets, covered: covered) {
                            case .confirmed: covered = offsets
                            case .fenced: broken = true
                            }
                        }
                    }
                case .offsets(let offsets):
                    if !broken {
                        context.guarantee.settled(offsets)
                        covered = offsets
                    }
                }
                settled.value.add(1)
                if Task.isCancelled { return }
            }
        }
        // Only once the worker's tasks have ended (nothing is assigned then): nothing to settle,
        // and nobody waits on it in vain.
        if !started {
            continuation.finish()
            ended.fire()
        }
    }

    func enqueue(_ entry: Entry) {
        if case .checkpoint = entry { recorder.checkpointsWaiting(1) }
        queue.yield(entry)
    }

    /// The partitions were lost (another member owns them): checkpoints and offsets not yet
    /// durable never become so; deliveries already submitted are still settled.
    func abandon() { abandoned.value.store(true, ordering: .relaxed) }

    /// Entries settled so far.
    var settled: Int { settledCount.value.value }

    /// Waits until everything enqueued so far is settled; the queue goes on taking entries.
    func settledSoFar() async {
        await withCheckedContinuation { continuation in
            let id = barriers.add(continuation)
            if case .terminated = queue.yield(.barrier(id)) { barriers.resume(id) }
        }
    }

    /// Waits until everything enqueued is settled; the queue takes nothing more.
    func finish() async {
        queue.finish()
        await ended.wait()
    }
}

/// Waiters of ``SettlementQueue/settledSoFar()``, resumed in turn, or all at once when the
/// settlement task ends.
private final class Barriers: Sendable {
    private let waiters = Mutex<(next: Int, waiting: [Int: CheckedContinuation<Void, Never>])>((0, [:]))

    func add(_ continuation: CheckedContinuation<Void, Never>) -> Int {
        waiters.withLock { w in
            w.next += 1
            w.waiting[w.next] = continuation
            return w.next
        }
    }

    func resume(_ id: Int) { waiters.withLock { $0.waiting.removeValue(forKey: id) }?.resume() }

    func resumeAll() {
        let all = waiters.withLock { w in
            defer { w.waiting = [:] }
            return Array(w.waiting.values)
        }
        for waiter in all { waiter.resume() }
    }
}

/// Settles one entry at a time for a lane.
private struct Settler: Sendable {
    let partitions: [TopicPartition]
    let context: SettlementQueue.Context

    private var partitionName: String { partitions.count == 1 ? "\(partitions[0])" : "\(partitions)" }

    /// Hands a checkpoint to the producer (everything before it is acknowledged) once the
    /// coordinator has not refused this worker as their owner, and settles it; each retry asks
    /// again. `.confirmed` once it is durable; `.fenced` when another member owns the
    /// partitions, or it could not be settled.
    func checkpoint(_ record: ProducerRecord, offsets: [TopicPartitionOffset], covered: [TopicPartitionOffset]) async -> Ownership {
        let confirm = { await context.guarantee.confirmOwnership(of: partitions, committing: covered) }
        let ownership = await confirm()
        guard case .confirmed = ownership, !Task.isCancelled else { return .fenced }
        let batch = ProducerBatch([record])
        let bytes = batch.byteCount
        context.backpressure.add(records: 1, bytes: bytes)
        let ticket = try? await context.producer.submit(batch)
        var unfenced = ResendFence()
        let settled = await settle(
            SettlementQueue.Delivery(
                records: batch, sources: [SettlementQueue.Delivery.checkpoint], inputs: [], ticket: ticket, offsets: offsets,
                inputCount: 0, heldRecords: 1, heldBytes: bytes),
            durable: true, fence: &unfenced, beforeRetry: { if case .fenced = await confirm() { return false } else { return true } })
        if settled { context.recorder.checkpointed() }
        return settled ? .confirmed : .fenced
    }

    /// Waits for a delivery's reports, retries what failed (at least once) or reports it
    /// (exactly once), dead-letters outputs that keep failing, sends again what landed ahead of
    /// an earlier retry (`fence`), then hands its offsets to the guarantee when `durable`. False
    /// when it could not be settled (the producer closed, or something that belongs to no input
    /// can never be delivered).
    func settle(
        _ delivery: SettlementQueue.Delivery, durable: Bool, fence: inout ResendFence, beforeRetry: (() async -> Bool)? = nil
    ) async -> Bool {
        defer { context.backpressure.remove(records: delivery.heldRecords, bytes: delivery.heldBytes, resume: resumeAll) }
        guard let ticket = delivery.ticket else { return producerClosed() }
        var records = delivery.records
        var sources = delivery.sources
        var reports = await ticket.reports()
        if Task.isCancelled { return false }
        var attempt = 1
        var firstFailure: Int64?
        var paused = false
        var delivered = DeliveredRecords()
        defer { if paused { endRetry() } }
        // Outputs that landed ahead of records an earlier retry sent to their partition: sent
        // again (once) after them. In `records`, the indices of such copies (delivered before,
        // so neither counted again nor dead-lettered).
        var ahead: [Int] = []
        var copies = Set<Int>()
        if fence.mayHold(ticket.sequence) {
            for i in reports.indices where reports[i].error == nil && sources[i] != SettlementQueue.Delivery.checkpoint {
                let topic = records.topic(i)
                if topic != context.deadLetterTopic, fence.landedAhead(topic: topic, partition: reports[i].partition, sequence: ticket.sequence) {
                    ahead.append(i)
                }
            }
        }
        while true {
            // A checkpoint or a dead letter: owed by the lane itself, retried until delivered (an
            // output past its attempts becomes a dead letter instead).
            func isOwedRecord(_ i: Int) -> Bool {
                sources[i] == SettlementQueue.Delivery.checkpoint || records.topic(i) == context.deadLetterTopic
            }
            var failed: [Int] = []
            // Per record, topics are compared by their number in the batch, not by name.
            let deadLetterTopic = records.topicNumber(context.deadLetterTopic)
            delivered.beginPass()
            for i in reports.indices {
                if reports[i].error != nil {
                    failed.append(i)
                } else if !copies.isEmpty && copies.contains(i) {
                    continue
                } else if records.topicNumber(of: i) == deadLetterTopic {
                    delivered.deadLetter(reason: records.header(DeadLetterHeader.reason, of: i))
                } else if sources[i] != SettlementQueue.Delivery.checkpoint {
                    delivered.output(topicNumber: records.topicNumber(of: i), of: records, at: i)
                }
            }
            if let log = context.acknowledgements {
                log.append(reports.indices.filter { reports[$0].error == nil && sources[$0] != SettlementQueue.Delivery.checkpoint }.map { i in
                    AcknowledgementLog.Entry(topic: records.topic(i), partition: reports[i].partition, offset: reports[i].offset, value: records[i].value)
                })
            }
            // Retried outputs land after whatever of this delivery was acknowledged behind them
            // on their partition: those go again too, after them.
            if !failed.isEmpty {
                var firstFailed: [OutputPartition: Int] = [:]
                for i in failed where !isOwedRecord(i) {
                    let key = OutputPartition(records.topic(i), reports[i].partition)
                    if firstFailed[key] == nil { firstFailed[key] = i }
                }
                for j in reports.indices where reports[j].error == nil && !isOwedRecord(j) && !ahead.contains(j) {
                    let key = OutputPartition(records.topic(j), reports[j].partition)
                    if key.covering.contains(where: { (firstFailed[$0] ?? j) < j }) { ahead.append(j) }
                }
            }
            if failed.isEmpty && ahead.isEmpty { break }
            if let error = failed.first.map({ reports[$0].error! }) {
                // The producer itself is broken (fatal, fenced, its producer id lost): every retry
                // and every dead letter would fail the same way. The worker stops, not ready, and a
                // restart brings a new producer; nothing after this becomes durable.
                if let unusable = context.producer.unusable ?? failed.lazy.compactMap({ reports[$0].error }).first(where: { $0.meansProducerUnusable }) {
                    context.fail(.producerUnusable("\(unusable)"))
                    return false
                }
                if case .handedOver = context.guarantee.deliveryFailed(error) {
                    context.recorder.deliveryFailed(records: failed.count, retrying: false)
                    // Exactly once: outputs refused for good are dead-lettered by the redo.
                    if let undeliverable = context.guarantee.undeliverable {
                        for i in failed where !isOwedRecord(i) && sources[i] >= 0 && reports[i].error!.cannotSucceed {
                            undeliverable.add(
                                origin: delivery.inputs[Int(sources[i])].origin, topic: records.topic(i), partition: reports[i].partition,
                                error: reports[i].error!)
                        }
                    }
                    break
                }
                // A checkpoint or a dead letter that can never be delivered: nothing after it may
                // become durable, and retrying would block the partition (and its revocation) for good.
                if let i = failed.first(where: { isOwedRecord($0) && reports[$0].error!.cannotSucceed }) {
                    return cannotDeliver(i, of: records, source: sources[i], error: reports[i].error!)
                }
                firstFailure = firstFailure ?? Int64(Date().timeIntervalSince1970 * 1000)
                context.recorder.deliveryFailed(records: failed.count, retrying: true)
            }
            var again = ProducerBatch()
            var againSources: [Int32] = []
            var againCopies = Set<Int>()
            // Where the outputs sent again go: what later outputs must not land ahead of.
            var fenced: [(topic: String, partition: Int32)] = []
            // Outputs that failed for good, or kept failing past the attempts, go to the
            // dead-letter topic as themselves, naming where they were going and the input they
            // came from: a redrive sends them there (a stateful stage could not make them again
            // from the input). An output too large for any topic goes as its input instead (once
            // per input): the stage made something it never can deliver. Checkpoints and dead
            // letters are retried on. Copies (delivered before) that keep failing are dropped.
            // Outputs that landed ahead of an earlier retry go again, in order with the rest.
            var deadInputs: [Int32: KafkaError] = [:]
            var deadOutputs = 0
            var retried = 0
            for i in ahead.isEmpty ? failed : (failed + ahead).sorted() {
                guard let failure = reports[i].error else {
                    again.append(i, of: records)
                    again.appendHeader(OutputRecord.resentHeader, text: "1")
                    againCopies.insert(again.count - 1)
                    againSources.append(sources[i])
                    fenced.append((records.topic(i), reports[i].partition))
                    continue
                }
                guard !isOwedRecord(i), failure.cannotSucceed || attempt >= context.retry.attempts else {
                    again.append(i, of: records)
                    if sources[i] != SettlementQueue.Delivery.checkpoint {
                        // An output sent again says so; later outputs of its partition that landed
                        // before it are sent again after it (the fence).
                        if !copies.contains(i) { again.appendHeader(OutputRecord.retriedHeader, text: String(attempt)) }
                        if records.topic(i) != context.deadLetterTopic { fenced.append((records.topic(i), reports[i].partition)) }
                    }
                    if copies.contains(i) { againCopies.insert(again.count - 1) }
                    againSources.append(sources[i])
                    retried += 1
                    continue
                }
                if copies.contains(i) { continue }
                if failure.isMessageTooLarge {
                    guard sources[i] >= 0 else { return cannotDeliver(i, of: records, source: sources[i], error: failure) }
                    deadInputs[sources[i]] = deadInputs[sources[i]] ?? failure
                    continue
                }
                let origin = sources[i] >= 0
                    ? delivery.inputs[Int(sources[i])].origin
                    : RecordOrigin(topic: partitions.first?.topic ?? "", partition: partitions.first?.partition ?? -1, offset: -1)
                again.append(RecordMapping.undelivered(
                    output: i, of: records, partition: reports[i].partition, origin: origin, error: failure, attempts: attempt,
                    firstFailure: firstFailure, stage: context.stageName, transform: context.transformName, topic: context.deadLetterTopic))
                againSources.append(SettlementQueue.Delivery.noInput)
                deadOutputs += 1
            }
            for (s, failure) in deadInputs.sorted(by: { $0.key < $1.key }) {
                again.append(RecordMapping.undelivered(
                    delivery.inputs[Int(s)], error: failure, attempts: attempt, firstFailure: firstFailure,
                    stage: context.stageName, transform: context.transformName, topic: context.deadLetterTopic))
                againSources.append(SettlementQueue.Delivery.noInput)
            }
            if let error = failed.first.map({ reports[$0].error! }) {
                let deadCount = deadInputs.count + deadOutputs
                if deadCount > 0 {
                    context.logger.error(
                        "delivery failed after \(attempt) attempt(s); outputs go to the dead-letter topic",
                        metadata: [
                            "partition": "\(partitionName)", "error": "\(error)", "outputs": "\(deadOutputs)",
                            "inputs": "\(deadInputs.count)",
                        ])
                } else if let suppressed = context.logLimiter.admit("retry") {
                    context.logger.warning(
                        "delivery failed, retrying",
                        metadata: ["partition": "\(partitionName)", "attempt": "\(attempt)", "error": "\(error)", "suppressed-before": "\(suppressed)"])
                }
                if !paused {
                    paused = true
                    beginRetry()
                }
                attempt += 1
                // Only fresh dead letters and copies to send: no reason to wait.
                if retried > 0 { try? await Task.sleep(for: context.retry.backoff(beforeAttempt: min(attempt, 30))) }
                if Task.isCancelled { return false }
                if let beforeRetry, !(await beforeRetry()) { return false }
            }
            if !ahead.isEmpty { context.recorder.resent(records: ahead.count) }
            if again.isEmpty { break }
            guard let next = try? await context.producer.submit(again) else { return producerClosed() }
            for (topic, partition) in fenced { fence.sentAgain(topic: topic, partition: partition, sequence: next.sequence) }
            records = again
            sources = againSources
            copies = againCopies
            ahead = []
            reports = await next.reports()
            // Cancelled (the shutdown ran past its deadline): what is not settled stays so.
            if Task.isCancelled { return false }
        }
        if durable, !delivery.offsets.isEmpty { context.guarantee.settled(delivery.offsets) }
        context.recorder.settled(inputs: delivery.inputCount, delivered: delivered, newestInput: delivery.inputs.last?.timestamp)
        context.guarantee.delivered(outputs: delivered.outputs, deadLetters: delivered.deadLetters)
        return true
    }

    /// Stops the worker: record `i` (a checkpoint, a dead letter, or an output too large even
    /// to be dead-lettered as its input) can never be delivered.
    private func cannotDeliver(_ i: Int, of records: ProducerBatch, source: Int32, error: KafkaError) -> Bool {
        let what = source == SettlementQueue.Delivery.checkpoint ? "the checkpoint of \(partitionName) (\(records.size(i)) bytes)"
            : records.topic(i) == context.deadLetterTopic ? "a dead letter of \(partitionName)"
            : "an advance output of \(partitionName)"
        let limit = error.isMessageTooLarge ? " (larger than the producer's message.max.bytes or the topic's max.message.bytes)" : ""
        context.fail(.undeliverable("\(what) to \(records.topic(i)) can never be delivered\(limit): \(error)"))
        return false
    }

    private func producerClosed() -> Bool {
        context.logger.error("producer closed while settling; the partition's later offsets stay uncommitted", metadata: ["partition": "\(partitionName)"])
        return false
    }

    /// The lane's partitions are paused while its deliveries are retried (the others go on).
    private func beginRetry() {
        for p in partitions { context.backpressure.beginRetry(p) }
        try? context.consumer.pause(partitions)
        context.recorder.pausedForRetry(1)
    }

    private func endRetry() {
        context.recorder.pausedForRetry(-1)
        let resumable = partitions.filter { context.backpressure.endRetry($0) }
        if !resumable.isEmpty { try? context.consumer.resume(resumable) }
    }

    /// Resumes what the in-flight bound paused, except partitions held by a retry.
    private func resumeAll(except retrying: Set<TopicPartition>) {
        if let assigned = try? context.consumer.assignment() { try? context.consumer.resume(assigned.filter { !retrying.contains($0) }) }
    }
}

/// Where a lane sent outputs again (retried after a failed delivery, or copies) and when: per
/// output partition, the sequence (``DeliveryTicket/sequence``) of the latest such submission. An
/// output of the lane submitted before it, and acknowledged on that partition, landed ahead of
/// the records sent again; it is sent again after them (a copy, `delivery.resent`), so that the
/// last copy of each output comes in input order. Retries are rare, so the check is one
/// comparison per delivery until there is one.
struct ResendFence {
    private var latest: [OutputPartition: UInt64] = [:]
    private var highest: UInt64 = 0

    /// Whether anything submitted at `sequence` can have landed ahead of records sent again.
    func mayHold(_ sequence: UInt64) -> Bool { sequence < highest }

    mutating func sentAgain(topic: String, partition: Int32, sequence: UInt64) {
        let key = OutputPartition(topic, partition)
        latest[key] = max(latest[key] ?? 0, sequence)
        highest = max(highest, sequence)
    }

    /// Whether an output acknowledged on `topic`/`partition`, submitted at `sequence`, was
    /// submitted before records sent again to that partition.
    func landedAhead(topic: String, partition: Int32, sequence: UInt64) -> Bool {
        guard sequence < highest else { return false }
        return OutputPartition(topic, partition).covering.contains { sequence < latest[$0] ?? 0 }
    }
}

/// An output topic's partition as a delivery report gives it; -1 when the partition was not known
/// (the record may have gone to any partition of the topic).
struct OutputPartition: Hashable {
    let topic: String
    let partition: Int32

    init(_ topic: String, _ partition: Int32) {
        self.topic = topic
        self.partition = partition < 0 ? -1 : partition
    }

    /// This partition, and the whole topic (for what went to an unknown partition).
    var covering: [OutputPartition] { partition < 0 ? [self] : [self, OutputPartition(topic, -1)] }
}
