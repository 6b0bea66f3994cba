import Synchronization
import Kafka

/// What a stage service has done so far (read by tests, the demo and, later, metrics).
public final class StageCounters: Sendable {
    /// Inputs handed to the stage (skipped restored ones not included).
    public let processed = Atomic<Int>(0)
    /// Inputs whose outputs are all settled.
    public let inputsDone = Atomic<Int>(0)
    /// Outputs delivered (dead letters and checkpoints not included).
    public let produced = Atomic<Int>(0)
    public let deadLettered = Atomic<Int>(0)
    public let retries = Atomic<Int>(0)
    public let rebalances = Atomic<Int>(0)
    public let commitFailures = Atomic<Int>(0)
    public let checkpoints = Atomic<Int>(0)
    /// Partitions whose state was restored from the changelog.
    public let restoredPartitions = Atomic<Int>(0)
    public let pausedPartitions = Atomic<Int>(0)
    /// Records taken in and not yet settled, as of the last tick (the in-flight bound's count).
    public let inFlightRecords = Atomic<Int>(0)
    /// Times the in-flight bound was reached and the worker waited for deliveries before
    /// taking more input.
    public let backpressureWaits = Atomic<Int>(0)
    /// Records the consumer has received from the brokers, as of librdkafka's latest
    /// statistics (`rxmsgs`). Above `processed` plus what is fetched ahead, records were fetched twice.
    public let fetchedRecords = Atomic<Int>(0)
    /// Exactly-once: transactions committed and aborted, and the outputs and dead letters that
    /// were written in aborted ones (hidden from `read_committed` readers, then written again).
    public let transactionsCommitted = Atomic<Int>(0)
    public let transactionsAborted = Atomic<Int>(0)
    public let abortedOutputs = Atomic<Int>(0)
    public let abortedDeadLetters = Atomic<Int>(0)
    /// When the first input was processed and the last output settled (benchmarks count from
    /// the first record to the last acknowledged output, so start-up and group join do not count).
    let firstProcessed = Mutex<ContinuousClock.Instant?>(nil)
    let lastSettled = Mutex<ContinuousClock.Instant?>(nil)
    /// Time the event loop spent handling events and ticks (the rest it waited for them).
    let loopBusy = Mutex<Duration>(.zero)
    public init() {}

    /// Seconds the event loop was busy.
    public var loopBusySeconds: Double { loopBusy.withLock { $0 }.asSeconds }

    /// Seconds from the first processed input to the last settled output (0 before both).
    public var activeSeconds: Double {
        guard let first = firstProcessed.withLock({ $0 }), let last = lastSettled.withLock({ $0 }), last > first else { return 0 }
        return (last - first).asSeconds
    }
}
