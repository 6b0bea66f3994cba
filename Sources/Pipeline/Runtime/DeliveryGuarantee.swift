import Kafka

/// How a settled stretch of input becomes durable: the one thing the two delivery modes do
/// differently. Everything else (processing, the order of settlement, checkpoints, retries,
/// dead letters) is the same code for both.
///
/// - ``AtLeastOnce``: settled offsets are stored for the consumer's next commit, which runs on
///   every tick, before partitions go, and on close. Failed deliveries are retried.
/// - ``ExactlyOnce``: outputs, checkpoints and settled offsets of a stretch go to Kafka in one
///   transaction; a failed delivery dooms it, and an abort rewinds the stretch.
///
/// The settlement queues call ``settled(_:)`` and ``deliveryFailed(_:)`` from their tasks; the
/// event loop calls the rest.
protocol DeliveryGuarantee: AnyObject, Sendable {
    /// From a settlement queue: a delivery failed (the producer itself is still usable). Says
    /// what the queue does with it.
    func deliveryFailed(_ error: KafkaError) -> DeliveryFailureAction

    /// From a settlement queue: these input offsets, and everything of their partitions before
    /// them, are settled.
    func settled(_ offsets: [TopicPartitionOffset])

    /// From a settlement queue: these outputs and dead letters were delivered (exactly once
    /// counts what an abort discards).
    func delivered(outputs: Int, deadLetters: Int)

    /// From a settlement queue, before a checkpoint of `partitions` is handed to the producer:
    /// whether the group coordinator still counts this worker as their owner. `covered` are the
    /// offsets of the lane's last durable checkpoint (or restored state): committing them again
    /// changes nothing, yet the coordinator refuses them from an evicted member.
    func confirmOwnership(of partitions: [TopicPartition], committing covered: [TopicPartitionOffset]) async -> Ownership

    /// Before a lane's state changes for inputs beginning at `first` (per input partition).
    func willChange(_ lane: PartitionLane, first: [TopicPartition: Int64]) throws(KafkaError)

    /// Whether a stateful lane's state is checkpointed now, after it changed.
    func checkpointDue(_ lane: PartitionLane) -> Bool

    /// Makes what is settled durable at this moment of the loop. Throws only when the worker
    /// must stop.
    func makeDurable(_ moment: DurableMoment, lanes: [PartitionLane]) async throws

    /// Outputs refused for good that the next submission of their input dead-letters instead
    /// (exactly once; nil for at least once, whose settlement dead-letters them in place).
    var undeliverable: UndeliverableOutputs? { get }
}

extension DeliveryGuarantee {
    func delivered(outputs: Int, deadLetters: Int) {}
    var undeliverable: UndeliverableOutputs? { nil }
}

/// What a settlement queue does with a failed delivery.
enum DeliveryFailureAction: Sendable {
    /// Retry it, within the retry policy; past it, or when it can never succeed, dead-letter it
    /// (an output as itself).
    case retry
    /// Nothing: the guarantee has taken the failure over (exactly once: the open transaction
    /// is aborted and its inputs redone).
    case handedOver
}

/// What the coordinator said of a lane's partitions before a checkpoint.
enum Ownership: Sendable {
    /// Not refused: the checkpoint may become durable.
    case confirmed
    /// Another member's (this one was evicted or fenced): nothing of the lane may become durable.
    case fenced
}

/// When the loop asks for durability.
enum DurableMoment {
    /// After a batch of records.
    case batch
    /// On the loop's timer.
    case tick
    /// These lanes' partitions are being revoked: what they owe must be durable before they go.
    case revocation([PartitionLane])
    /// These lanes' partitions were lost: they are someone else's, nothing of theirs may become durable.
    case lost([PartitionLane])
    /// The worker stops: everything.
    case shutdown
}
