import Kafka
import Logging
import Synchronization
import Workers

/// `delivery: exactly-once`: a stretch of input goes to Kafka in one transaction: its outputs
/// and dead letters, a checkpoint of every state it changed, and the settled input offsets,
/// sent with the consumer's group metadata (`send_offsets_to_transaction`, KIP-447). Nothing is
/// stored or committed through the consumer.
///
/// A transaction commits every `commit-interval`, on every tick, before partitions are revoked
/// and at shutdown. If it cannot commit (a failed delivery, the coordinator refusing the
/// offsets of a member that lost its partitions, a timeout), it is aborted and undone: every
/// lane it touched gets back its state (a value copy taken when the transaction first touched
/// it) and offsets, each partition is read again from the transaction's first input (the
/// consumer drops what it fetched before the rewind), and the work is redone after a backoff.
/// After the retry policy's attempts of aborts in a row the worker stops; a fenced producer (a
/// newer instance with the same `transactional.id`) stops it at once. An output the broker
/// refused for good is dead-lettered by the redo (``UndeliverableOutputs``), so one such output
/// costs one abort, not the worker.
final class ExactlyOnce: DeliveryGuarantee {
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let changelog: Changelog?
    let commitInterval: Duration
    let retry: Topology.RetryPolicy
    let transactionTimeout: Duration
    /// Fault injection (tests): asked before a transaction that carries offsets commits.
    let fault: (@Sendable () -> KafkaError?)?
    let recorder: StageRecorder
    let membership: MembershipGate
    let health: WorkerHealth
    let logger: Logger

    /// What an abort needs of a lane: how it looked when the transaction first touched it, and
    /// where its inputs began per partition (the rewind target).
    struct Undo: Sendable {
        var lane: PartitionLane.Snapshot
        var first: [TopicPartition: Int64] = [:]
    }

    /// The open transaction (settlement tasks record failures and offsets; the loop the rest).
    struct Open {
        var since: ContinuousClock.Instant?
        /// Outputs and dead letters delivered since it began (what an abort discards).
        var outputs = 0
        var deadLetters = 0
        var undo: [TopicPartition: Undo] = [:]
        /// The first delivery failure: the transaction cannot commit.
        var failure: KafkaError?
        /// Settled input offsets to send with it.
        var offsets: [TopicPartition: Int64] = [:]
        var abortsInARow = 0
    }

    private let open = Mutex(Open())
    let undeliverable: UndeliverableOutputs? = UndeliverableOutputs()

    init(
        consumer: KafkaConsumer, producer: KafkaProducer, changelog: Changelog?, definition: Topology.Stage, settings: WorkerSettings,
        recorder: StageRecorder, membership: MembershipGate, health: WorkerHealth, logger: Logger
    ) {
        self.membership = membership
        self.consumer = consumer
        self.producer = producer
        self.changelog = changelog
        self.commitInterval = definition.commitInterval
        self.retry = definition.retry
        self.transactionTimeout = settings.transactionTimeout
        self.fault = settings.transactionFault
        self.recorder = recorder
        self.health = health
        self.logger = logger
    }

    /// The open transaction cannot commit: it is aborted and its inputs redone.
    func deliveryFailed(_ error: KafkaError) -> DeliveryFailureAction {
        open.withLock { $0.failure = $0.failure ?? error }
        return .handedOver
    }

    func settled(_ offsets: [TopicPartitionOffset]) {
        open.withLock { s in for o in offsets { s.offsets[o.topicPartition] = max(s.offsets[o.topicPartition] ?? -1, o.offset) } }
    }

    func delivered(outputs: Int, deadLetters: Int) {
        open.withLock { s in
            guard s.since != nil else { return }
            s.outputs += outputs
            s.deadLetters += deadLetters
        }
    }

    func willChange(_ lane: PartitionLane, first: [TopicPartition: Int64]) throws(KafkaError) {
        if open.withLock({ $0.since == nil }) {
            try producer.beginTransaction()
            open.withLock { s in s.since = .now }
        }
        let snapshot = Undo(lane: lane.snapshot())
        open.withLock { s in
            if s.undo[lane.id] == nil { s.undo[lane.id] = snapshot }
            for (tp, offset) in first where s.undo[lane.id]!.first[tp] == nil { s.undo[lane.id]!.first[tp] = offset }
        }
    }

    /// Checkpoints go in transactions whose offsets carry the group's generation: the
    /// coordinator refuses an evicted member's, and the transaction aborts.
    func confirmOwnership(of partitions: [TopicPartition], committing covered: [TopicPartitionOffset]) async -> Ownership { .confirmed }

    /// Every transaction checkpoints the states it changed (``commit(_:lanes:)``).
    func checkpointDue(_ lane: PartitionLane) -> Bool { false }

    func makeDurable(_ moment: DurableMoment, lanes: [PartitionLane]) async throws {
        switch moment {
        case .batch:
            if let since = open.withLock({ $0.since }), ContinuousClock.now - since >= commitInterval { try await commit("interval", lanes: lanes) }
        case .tick:
            try await commit("tick", lanes: lanes)
        case .revocation:
            // What was done for the partitions commits before they go (on a lost generation the
            // coordinator refuses the offsets, and the transaction aborts).
            try await commit("revocation", lanes: lanes)
        case .lost(let going):
            // The coordinator would refuse its offsets, and its outputs for the lost partitions
            // are their new owner's to make: abort, and rewind the partitions still ours.
            if open.withLock({ $0.since != nil }) {
                try await abort(after: KafkaError(code: .broker, message: "partitions lost"), reason: "partitions lost", lanes: lanes, excluding: Set(going.map(\.id)))
            }
        case .shutdown:
            do {
                try await commit("shutdown", lanes: lanes)
            } catch {
                logger.warning("the last transaction did not commit: \(error)")
            }
        }
    }

    /// Commits the open transaction: the states it changed go to the changelog, every output is
    /// delivered, and the settled input offsets are committed with it. If it cannot commit, it is
    /// aborted and its inputs are processed again. Throws only when the producer was fenced (a
    /// newer instance owns the work: this one must stop) or aborts keep failing.
    private func commit(_ reason: String, lanes: [PartitionLane]) async throws {
        guard open.withLock({ $0.since != nil }) else { return }
        do {
            if let changelog {
                for lane in lanes where lane.dirty { try lane.checkpoint(to: changelog) }
            }
            for lane in lanes { await lane.settled() }
            let (failure, settled) = open.withLock { s in
                defer { s.offsets = [:] }
                return (s.failure, s.offsets.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) })
            }
            if let failure { throw failure }
            await membership.waitUntilSure()
            if !settled.isEmpty, let injected = fault?() { throw injected }
            if !settled.isEmpty {
                try await producer.sendOffsetsToTransaction(settled, group: consumer.groupMetadata(), timeout: transactionTimeout)
            }
            try await commitRetrying()
            open.withLock { s in s = Open() }
            recorder.transactionCommitted()
            health.committed(ok: true)
        } catch {
            if let kafka = error as? KafkaError, kafka.isFatal {
                logger.error("exactly-once: the producer was fenced or failed for good; stopping (\(reason)): \(kafka)")
                throw kafka
            }
            try await abort(after: error, reason: reason, lanes: lanes, excluding: [])
        }
    }

    /// `commit_transaction`, repeated while librdkafka says a retry may succeed.
    private func commitRetrying() async throws(KafkaError) {
        var attempt = 1
        while true {
            do {
                try await producer.commitTransaction(timeout: transactionTimeout)
                return
            } catch {
                guard error.isRetriable, !error.requiresAbort, !error.isFatal, attempt < retry.attempts else { throw error }
                attempt += 1
                try? await Task.sleep(for: retry.backoff(beforeAttempt: attempt))
            }
        }
    }

    /// Aborts the open transaction (nothing of it becomes visible to `read_committed` readers,
    /// its offsets are not committed) and rewinds: each lane it touched gets back its state and
    /// offsets, and each partition is read again from the transaction's first input. Backs off
    /// before going on; throws after the retry policy's attempts of aborts in a row, when the
    /// abort itself fails for good, or when a partition cannot be rewound (going on would skip
    /// the aborted inputs).
    private func abort(after error: any Error, reason: String, lanes: [PartitionLane], excluding: Set<TopicPartition>) async throws {
        recorder.commitFailed()
        health.committed(ok: false)
        logger.warning("exactly-once: transaction aborted (\(reason)): \(error)")
        try await producer.abortTransaction(timeout: transactionTimeout)
        for lane in lanes { await lane.settled() }
        let aborted = open.withLock { s in
            defer {
                s = Open(abortsInARow: s.abortsInARow + 1)
            }
            return s
        }
        recorder.transactionAborted(outputs: aborted.outputs, deadLetters: aborted.deadLetters)
        var rewind: [TopicPartitionOffset] = []
        var rewound: [(PartitionLane, TopicPartition)] = []
        for lane in lanes where !excluding.contains(lane.id) {
            guard let undo = aborted.undo[lane.id] else { continue }
            for (tp, first) in undo.first {
                rewind.append(TopicPartitionOffset(tp.topic, tp.partition, offset: first))
                rewound.append((lane, tp))
            }
            lane.rewind(to: undo.lane)
        }
        if !rewind.isEmpty {
            // The consumer drops what it fetched before the seek; an event the loop has not
            // handled yet may still hold such records: up to `handedOut`, they are dropped.
            let handedOut = try await consumer.seek(rewind)
            for (lane, tp) in rewound { lane.dropFetchedBeforeSeek(tp, handedOut: handedOut) }
        }
        let aborts = aborted.abortsInARow + 1
        if aborts >= retry.attempts {
            throw KafkaError(code: .broker, message: "exactly-once: \(aborts) transactions in a row aborted; last: \(error)")
        }
        try? await Task.sleep(for: retry.backoff(beforeAttempt: aborts + 1))
    }
}
