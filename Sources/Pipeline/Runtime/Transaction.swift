import Synchronization
import Workers
import Kafka

/// Delivery failures of the open transaction, recorded by the lanes' settlers.
final class TransactionFailures: Sendable {
    private let first = Mutex<KafkaError?>(nil)

    func record(_ error: KafkaError) { first.withLock { $0 = $0 ?? error } }

    /// The first failure since the last call, if any.
    func take() -> KafkaError? { first.withLock { e in defer { e = nil }; return e } }
}

/// The open transaction of an exactly-once stage (`delivery: exactly-once`), confined to the
/// service's event loop.
///
/// Outputs, dead letters, state checkpoints and the input offsets of a stretch of input go to
/// Kafka in one transaction: `read_committed` readers see all of it or none of it, and the
/// group's offsets move only with it. To abort, the loop needs what each lane looked like when
/// the transaction first touched it, which this keeps: the stage state (a value copy), the
/// offsets, and where the transaction's inputs began per partition.
struct OpenTransaction {
    struct Undo {
        var runner: StageRunner?
        var next: [TopicPartition: Int64]
        var dirty: Bool
        /// Per input partition, the offset of the transaction's first input (the rewind target).
        var first: [TopicPartition: Int64] = [:]
    }

    /// When the transaction began (nil: none is open).
    var openedAt: ContinuousClock.Instant?
    /// The service's delivered outputs and dead letters when it began (every earlier one is
    /// settled by then), to count what an abort discards.
    var producedBefore = 0
    var deadLetteredBefore = 0
    /// By lane id: the lanes the transaction touched.
    var undo: [TopicPartition: Undo] = [:]
    /// Transactions aborted since the last commit.
    var abortsInARow = 0

    var isOpen: Bool { openedAt != nil }

    mutating func closed() {
        openedAt = nil
        undo = [:]
    }
}
