import Deadlines
import Foundation
import Logging
import Synchronization

/// What a consumer hands to the application, in order.
public enum ConsumerEvent: Sendable, Hashable {
    /// Records in partition order (at most ``ConsumerConfiguration/maxBatchSize``).
    case records([ConsumerRecord])
    /// Partitions given to this member. They are assigned when the application asks for the
    /// next event, so it can prepare first: load state, choose where a partition starts
    /// (``KafkaConsumer/seek(_:)`` of one of them sets its start instead of the committed offset),
    /// pause some (``KafkaConsumer/pause(_:)``). ``KafkaConsumer/assignment()`` includes them meanwhile.
    case assigned([TopicPartition])
    /// Partitions taken away. They stay assigned until the application asks for the next event,
    /// so it can finish work and commit their offsets first.
    case revoked([TopicPartition])
    /// Partitions taken away without a revocation: the member lost its place in the group (its
    /// session expired, e.g. the process was stopped for longer than `session.timeout.ms`).
    /// They may belong to another member already: nothing of theirs can be committed, and
    /// stored offsets of theirs are dropped.
    case lost([TopicPartition])
    /// A partition was read to its end (only with ``ConsumerConfiguration/reportEndOfPartition``);
    /// the offset is the next one that will be written.
    case endOfPartition(TopicPartitionOffset)
}

/// A consumer-group member. Iterate it for ``ConsumerEvent``s.
///
/// The sequence is pulled: a dedicated thread polls librdkafka for at most one batch ahead of
/// the application (copied while the application works on the previous one), so a slow
/// application is never buried in buffered records, and rebalance events reach the application
/// before the rebalance completes. One iteration at a time.
///
/// Offsets are never committed behind the application's back: ``store(_:)`` marks records as
/// processed; stored offsets are committed in the background (``ConsumerConfiguration/autoCommit``),
/// by ``commit()``, and on ``close(deadline:)``.
public final class KafkaConsumer: AsyncSequence, Sendable {
    public typealias Element = ConsumerEvent
    public typealias Failure = KafkaError

    private let core: ConsumerCore

    public init(configuration: ConsumerConfiguration, logger: Logger = Logger(label: "kafka.consumer")) throws(KafkaError) {
        guard configuration.maxBatchSize > 0 else {
            throw KafkaError.invalidConfiguration(key: "maxBatchSize", "maxBatchSize must be at least 1, got \(configuration.maxBatchSize)")
        }
        let consumer = try RDKafkaConsumer(properties: configuration.librdkafkaProperties(), logger: logger)
        core = ConsumerCore(consumer: consumer)
        ConsumerPollLoop.start(core: core, maxBatchSize: configuration.maxBatchSize)
    }

    deinit { core.requestClose() }

    /// Subscribes the group member to these topics (replacing an earlier subscription).
    public func subscribe(_ topics: [String]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.subscribe(topics) }
    }

    /// Reads these partitions from these offsets without joining the group (manual assignment;
    /// use instead of ``subscribe(_:)``). ``TopicPartitionOffset/beginning`` and
    /// ``TopicPartitionOffset/end`` are the logical offsets. An empty list unassigns.
    ///
    /// Everything fetched for an earlier assignment and not handed out yet is dropped: the next
    /// event belongs to this one.
    public func assign(_ offsets: [TopicPartitionOffset]) async throws(KafkaError) {
        try await core.perform(.assign(offsets))
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let core: ConsumerCore
        public mutating func next() async throws(KafkaError) -> ConsumerEvent? {
            try await core.next()
        }
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(KafkaError) -> ConsumerEvent? {
            try await core.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(core: core) }

    /// Marks these records as processed: for each partition, the offset after the highest record
    /// is stored for the next commit.
    public func store(_ records: some Sequence<ConsumerRecord>) throws(KafkaError) {
        var runs = OffsetRuns()
        // Read in place where the records are contiguous (an array): iterating would copy
        // every record (a retain and release of each of its buffers).
        if records.withContiguousStorageIfAvailable({ (buffer: UnsafeBufferPointer<ConsumerRecord>) -> Void in for i in buffer.indices { runs.add(buffer[i]) } }) == nil {
            for r in records { runs.add(r) }
        }
        let offsets = runs.finish()
        guard !offsets.isEmpty else { return }
        try store(offsets: offsets)
    }

    /// The offset after the highest record per partition. Batches come in runs of one
    /// partition: the partition is looked up only when it changes.
    private struct OffsetRuns {
        var next: [TopicPartition: Int64] = [:]
        var run: (topic: String, partition: Int32, offset: Int64)?

        @inline(__always)
        mutating func add(_ r: borrowing ConsumerRecord) {
            if let current = run, current.partition == r.partition, current.topic == r.topic {
                if r.offset + 1 > current.offset { run!.offset = r.offset + 1 }
                return
            }
            close()
            run = (r.topic, r.partition, r.offset + 1)
        }

        private mutating func close() {
            guard let current = run else { return }
            let tp = TopicPartition(current.topic, current.partition)
            next[tp] = Swift.max(next[tp] ?? -1, current.offset)
        }

        mutating func finish() -> [TopicPartitionOffset] {
            close()
            run = nil
            return next.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
        }
    }

    /// Stores explicit offsets (each the next offset to read). Offsets of partitions of an
    /// assignment the application is handling are stored once it is made.
    public func store(offsets: [TopicPartitionOffset]) throws(KafkaError) {
        let now = core.storeAssigned(offsets)
        if !now.isEmpty { try core.consumer.client.using { () throws(KafkaError) in try core.consumer.store(now) } }
        core.remember(offsets)
    }

    /// Commits the stored offsets and waits for the broker's answer, at most `timeout` (then it
    /// throws ``KafkaError/Code/timedOut``; a coordinator that does not answer would hold it for
    /// good). A cancelled task stops waiting within 100 ms (``KafkaError/Code/cancelled``).
    public func commit(timeout: Duration = .seconds(60)) async throws(KafkaError) {
        try await commit(nil, timeout: timeout)
    }

    /// Commits these offsets (each the next offset to read); waits as ``commit(timeout:)`` does.
    public func commit(_ offsets: [TopicPartitionOffset], timeout: Duration = .seconds(60)) async throws(KafkaError) {
        try await commit(Optional(offsets), timeout: timeout)
    }

    private func commit(_ offsets: [TopicPartitionOffset]?, timeout: Duration) async throws(KafkaError) {
        let consumer = core.consumer
        let ms = timeout.timeoutMilliseconds
        // The waiting thread is not the task's: it learns of a cancellation through this.
        let flag = CancelFlag()
        let outcome: Result<Void, KafkaError> = await withTaskCancellationHandler {
            await BlockingExecutor.run { () -> Result<Void, KafkaError> in
                Result { () throws(KafkaError) in
                    try consumer.client.using { () throws(KafkaError) in
                        try consumer.commit(offsets, timeoutMilliseconds: ms) { flag.value.load(ordering: .relaxed) }
                    }
                }
            }
        } onCancel: {
            flag.value.store(true, ordering: .relaxed)
        }
        try outcome.get()
    }

    /// The group's committed offsets for these partitions (-1001, librdkafka's "invalid", when none).
    public func committed(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws(KafkaError) -> [TopicPartitionOffset] {
        let consumer = core.consumer
        let ms = timeout.timeoutMilliseconds
        return try await BlockingExecutor.run { () throws(KafkaError) in
            try consumer.client.using { () throws(KafkaError) in try consumer.committed(partitions, timeoutMilliseconds: ms) }
        }
    }

    /// The next offset this member will read, per partition.
    public func position(_ partitions: [TopicPartition]) throws(KafkaError) -> [TopicPartitionOffset] {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.position(partitions) }
    }

    /// The partitions assigned to this member, and those of an assignment the application is
    /// handling (``ConsumerEvent/assigned(_:)``).
    public func assignment() throws(KafkaError) -> [TopicPartition] {
        let assigned = try core.consumer.client.using { () throws(KafkaError) in try core.consumer.assignment() }
        return assigned + core.partitionsBeingAssigned.filter { !assigned.contains($0) }
    }

    /// The group membership to send with a transaction's offsets (``KafkaProducer/sendOffsetsToTransaction(_:group:timeout:)``).
    public func groupMetadata() throws(KafkaError) -> ConsumerGroupMetadata {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.groupMetadata() }
    }

    /// Moves the read position of partitions (e.g. back to the first input of an aborted
    /// transaction). Records of theirs fetched before the seek and not handed out yet are
    /// dropped: the next one of each partition is the one sought (or the first after it).
    ///
    /// For a partition of an assignment the application is handling (``ConsumerEvent/assigned(_:)``),
    /// this is where it starts. While the application handles a revocation the seek is made
    /// when the rebalance completes, before any further event; an error of that seek is thrown
    /// by the next `next()`.
    ///
    /// Returns how many events this consumer had handed out when the seek was made: an
    /// application that keeps events it has not handled yet (fetched ahead of its own work) must
    /// drop those partitions' records from events up to that one.
    @discardableResult
    public func seek(_ offsets: [TopicPartitionOffset]) async throws(KafkaError) -> Int {
        guard let rest = core.startAssigned(offsets) else { return core.eventsDelivered }
        return try await core.perform(.seek(rest))
    }

    /// Stops fetching these partitions until ``resume(_:)``. librdkafka also throws away what it
    /// has fetched ahead for them (a batch already handed out is not affected), and the resume
    /// fetches it again from the application's position (librdkafka issues #1849, #5343): do not
    /// pause as a matter of course for flow control; stop asking for events instead.
    public func pause(_ partitions: [TopicPartition]) throws(KafkaError) {
        let rest = core.pauseAssigned(partitions)
        guard !rest.isEmpty else { return }
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.pause(rest) }
    }

    public func resume(_ partitions: [TopicPartition]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.resume(partitions) }
    }

    /// The high watermark seen in the last fetch from this partition (no broker round trip).
    public func cachedHighWatermark(_ partition: TopicPartition) -> Int64? {
        (try? core.consumer.client.using { core.consumer.cachedWatermarks(partition)?.high }) ?? nil
    }

    /// Rebalance callbacks librdkafka has begun on the poll thread (tests).
    var rebalanceCallbacks: Int { core.rebalanceCallbacks.value }

    /// Events the poll thread has fetched ahead and not handed out yet (tests).
    var bufferedEvents: Int { core.bufferedEvents.value }

    /// Whether any of these partitions was lost (``ConsumerEvent/lost(_:)``) and not assigned to
    /// this member again, as of librdkafka's rebalance callback: true already while the
    /// application is still handling earlier events.
    public func wasLost(_ partitions: [TopicPartition]) -> Bool {
        core.lostPartitions.withLock { lost in partitions.contains(where: lost.contains) }
    }

    /// librdkafka's latest statistics, when ``ConsumerConfiguration/statisticsInterval`` is set.
    public var statistics: KafkaStatistics? { core.consumer.rebalance.statistics.withLock { $0 } }

    /// Ends the event sequence, commits stored offsets, and leaves the group, within the deadline.
    /// Throws ``KafkaError/Code/timedOut`` when the deadline passes first (the close goes on in
    /// the background).
    public func close(deadline: Duration = .seconds(10)) async throws(KafkaError) {
        let core = self.core
        // The final commit may wait for a rebalance to settle: most of the deadline, leaving
        // the rest for leaving the group and destroying the handle.
        let settle = deadline * 0.8
        let outcome = await Deadline.race(deadline) { await core.close(settleWithin: settle) }
        switch outcome {
        case .none: throw KafkaError.timedOut("closing the consumer")
        case .some(.some(let error)): throw error
        case .some(.none): return
        }
    }
}

/// Tells a blocking wait on another thread that its task was cancelled.
private final class CancelFlag: Sendable {
    let value = Atomic<Bool>(false)
}
