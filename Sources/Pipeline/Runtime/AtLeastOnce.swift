import Kafka
import Logging
import Synchronization

/// `delivery: at-least-once`: settled offsets are stored for the consumer's next commit; they
/// are committed on every tick and before partitions are revoked, and the consumer commits once
/// more when it closes. A crash re-reads from the last commit: outputs may repeat, under the
/// same dedupe key; nothing is skipped, because nothing is stored before it is settled.
///
/// A commit waits at most ``commitTimeout`` for the coordinator. The tick's commit runs beside
/// the loop (one at a time; a tick that finds one under way skips), so a coordinator that does
/// not answer neither stops the records nor holds a stop: that commit is given up when the
/// worker stops, and the consumer's close commits what is stored.
final class AtLeastOnce: DeliveryGuarantee {
    /// How long a commit waits for the coordinator's answer (librdkafka's own wait has no end).
    static let commitTimeout: Duration = .seconds(10)

    let consumer: KafkaConsumer
    let checkpointInterval: Duration
    let recorder: StageRecorder
    let membership: MembershipGate
    let health: WorkerHealth
    let logLimiter: LogRateLimiter
    let logger: Logger
    /// The worker's tasks (the tick's commit runs as one of them) and its stop.
    let tasks: ChildTasks
    let stopping: OneShotEvent
    private let tickCommitUnderWay = Atomic<Bool>(false)

    init(
        consumer: KafkaConsumer, checkpointInterval: Duration, recorder: StageRecorder, membership: MembershipGate, health: WorkerHealth,
        logLimiter: LogRateLimiter, logger: Logger, tasks: ChildTasks, stopping: OneShotEvent
    ) {
        self.consumer = consumer
        self.checkpointInterval = checkpointInterval
        self.recorder = recorder
        self.membership = membership
        self.health = health
        self.logLimiter = logLimiter
        self.logger = logger
        self.tasks = tasks
        self.stopping = stopping
    }

    func deliveryFailed(_ error: KafkaError) -> DeliveryFailureAction { .retry }

    func settled(_ offsets: [TopicPartitionOffset]) {
        do {
            try consumer.store(offsets: offsets)
        } catch {
            // Revoked or lost meanwhile: the next owner reads from the last commit (at least once).
            logger.info("offset not stored (partition no longer assigned)", metadata: ["offsets": "\(offsets)", "error": "\(error)"])
        }
    }

    /// A synchronous commit of offsets already durable: the coordinator checks the member. An
    /// evicted member (its poll thread parked while a revocation waited on stuck outputs, say, or
    /// cut off from the coordinator past its session) is refused with `UNKNOWN_MEMBER_ID` (or
    /// `FENCED_INSTANCE_ID`) and learns it here, before its older state can land after the new
    /// owner's. Any other answer (a rebalance under way, the coordinator away) proves nothing
    /// either way and the checkpoint goes ahead, as it did before this check: holding it would
    /// hold the partition's revocation, and the rejoin the coordinator waits for.
    func confirmOwnership(of partitions: [TopicPartition], committing covered: [TopicPartitionOffset]) async -> Ownership {
        guard !covered.isEmpty else { return .confirmed }
        do {
            try await consumer.commit(covered, timeout: Self.commitTimeout)
        } catch {
            if error.meansMemberFenced || consumer.wasLost(partitions) {
                logger.warning(
                    "the coordinator no longer counts this worker as the owner; its checkpoints of these partitions are dropped",
                    metadata: ["partitions": "\(partitions)", "error": "\(error)"])
                return .fenced
            }
            if let suppressed = logLimiter.admit("ownership") {
                logger.info(
                    "ownership not confirmed before a checkpoint (it goes ahead)",
                    metadata: ["partitions": "\(partitions)", "error": "\(error)", "suppressed-before": "\(suppressed)"])
            }
        }
        return .confirmed
    }

    func willChange(_ lane: PartitionLane, first: [TopicPartition: Int64]) throws(KafkaError) {}

    func checkpointDue(_ lane: PartitionLane) -> Bool { ContinuousClock.now - lane.lastCheckpoint >= checkpointInterval }

    func makeDurable(_ moment: DurableMoment, lanes: [PartitionLane]) async throws {
        switch moment {
        case .batch, .lost:
            return
        case .tick:
            commitBesideTheLoop()
        case .revocation(let going):
            for lane in going { await lane.settled() }
            await commit("revocation")
        case .shutdown:
            // The consumer's close commits what is stored by then.
            for lane in lanes { await lane.settled() }
        }
    }

    /// The tick's commit, as a task of the worker that ends when it stops.
    private func commitBesideTheLoop() {
        guard tickCommitUnderWay.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        let started = tasks.start { [self] in
            await stopping.cancelling { [self] in await commit("tick") }
            tickCommitUnderWay.store(false, ordering: .releasing)
        }
        if !started { tickCommitUnderWay.store(false, ordering: .releasing) }
    }

    /// A failed commit (a lost assignment, a group mid-rebalance) is never a reason to stop the
    /// worker: the next owner reads from the last commit. Failing for long turns it not-ready.
    private func commit(_ reason: String) async {
        await membership.waitUntilSure()
        do {
            try await consumer.commit(timeout: Self.commitTimeout)
            health.committed(ok: true)
        } catch where error.code == .cancelled {
            // Given up because the worker stops: the consumer's close commits.
        } catch {
            recorder.commitFailed()
            health.committed(ok: false)
            if let suppressed = logLimiter.admit("commit-failure") {
                logger.warning("commit on \(reason) failed: \(error)", metadata: ["suppressed-before": "\(suppressed)"])
            }
        }
    }
}
