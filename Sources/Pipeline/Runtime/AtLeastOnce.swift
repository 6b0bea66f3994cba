import Kafka
import Logging

/// `delivery: at-least-once`: settled offsets are stored for the consumer's next commit; the
/// loop commits on every tick and before partitions are revoked, and the consumer commits once
/// more when it closes. A crash re-reads from the last commit: outputs may repeat, under the
/// same dedupe key; nothing is skipped, because nothing is stored before it is settled.
final class AtLeastOnce: DeliveryGuarantee {
    let consumer: KafkaConsumer
    let checkpointInterval: Duration
    let recorder: StageRecorder
    let membership: MembershipGate
    let health: WorkerHealth
    let logLimiter: LogRateLimiter
    let logger: Logger

    init(
        consumer: KafkaConsumer, checkpointInterval: Duration, recorder: StageRecorder, membership: MembershipGate, health: WorkerHealth,
        logLimiter: LogRateLimiter, logger: Logger
    ) {
        self.consumer = consumer
        self.checkpointInterval = checkpointInterval
        self.recorder = recorder
        self.membership = membership
        self.health = health
        self.logLimiter = logLimiter
        self.logger = logger
    }

    var retriesDeliveries: Bool { true }

    func deliveryFailed(_ error: KafkaError) {}

    func settled(_ offsets: [TopicPartitionOffset]) {
        do {
            try consumer.store(offsets: offsets)
        } catch {
            // Revoked or lost meanwhile: the next owner reads from the last commit (at least once).
            logger.info("offset not stored (partition no longer assigned)", metadata: ["offsets": "\(offsets)", "error": "\(error)"])
        }
    }

    /// A synchronous commit of offsets already durable: the coordinator checks the member and
    /// its generation. An evicted member (its poll thread parked while a revocation waited on
    /// stuck outputs, say, or cut off from the coordinator) is refused, and learns it here,
    /// before its older state can land after the new owner's. A refusal during a rebalance, or
    /// no answer, is asked again for up to ``ownershipPatience``; then this checkpoint is skipped.
    func confirmOwnership(of partitions: [TopicPartition], committing covered: [TopicPartitionOffset]) async -> Ownership {
        guard !covered.isEmpty else { return .confirmed }
        let giveUp = ContinuousClock.now + ownershipPatience
        var wait = Duration.milliseconds(100)
        while true {
            do {
                try await consumer.commit(covered)
                return .confirmed
            } catch {
                if error.meansMemberFenced || consumer.wasLost(partitions) {
                    logger.warning(
                        "the coordinator no longer counts this worker as the owner; its checkpoints of these partitions are dropped",
                        metadata: ["partitions": "\(partitions)", "error": "\(error)"])
                    return .fenced
                }
                guard ContinuousClock.now + wait < giveUp else {
                    if let suppressed = logLimiter.admit("ownership") {
                        logger.warning(
                            "ownership not confirmed; checkpoint skipped (the next one asks again)",
                            metadata: ["partitions": "\(partitions)", "error": "\(error)", "suppressed-before": "\(suppressed)"])
                    }
                    return .unsure
                }
                try? await Task.sleep(for: wait)
                wait = min(wait * 2, .seconds(2))
            }
        }
    }

    /// How long a checkpoint waits for the coordinator to confirm ownership.
    let ownershipPatience = Duration.seconds(10)

    func willChange(_ lane: PartitionLane, first: [TopicPartition: Int64]) throws(KafkaError) {}

    func checkpointDue(_ lane: PartitionLane) -> Bool { ContinuousClock.now - lane.lastCheckpoint >= checkpointInterval }

    func makeDurable(_ moment: DurableMoment, lanes: [PartitionLane]) async throws {
        switch moment {
        case .batch, .lost:
            return
        case .tick:
            await commit("tick")
        case .revocation(let going):
            for lane in going { await lane.settled() }
            await commit("revocation")
        case .shutdown:
            // The consumer's close commits what is stored by then.
            for lane in lanes { await lane.settled() }
        }
    }

    /// A failed commit (a lost assignment, a group mid-rebalance) is never a reason to stop the
    /// worker: the next owner reads from the last commit. Failing for long turns it not-ready.
    private func commit(_ reason: String) async {
        await membership.waitUntilSure()
        do {
            try await consumer.commit()
            health.committed(ok: true)
        } catch {
            recorder.commitFailed()
            health.committed(ok: false)
            if let suppressed = logLimiter.admit("commit-failure") {
                logger.warning("commit on \(reason) failed: \(error)", metadata: ["suppressed-before": "\(suppressed)"])
            }
        }
    }
}
