import Foundation
import Logging
import Synchronization

/// What a consumer hands to the application, in order.
public enum ConsumerEvent: Sendable, Hashable {
    /// Records in partition order (at most ``ConsumerConfiguration/maxBatchSize``).
    case records([ConsumerRecord])
    /// Partitions given to this member. They are assigned already (they can be paused, their
    /// committed offsets looked up), but none of their records arrives before the application
    /// asks for the next event, so it can prepare (e.g. load state) first.
    case assigned([TopicPartition])
    /// Partitions taken away. They stay assigned until the application asks for the next event,
    /// so it can finish work and commit their offsets first.
    case revoked([TopicPartition])
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
        core = ConsumerCore(consumer: consumer, maxBatchSize: configuration.maxBatchSize)
        core.start()
    }

    deinit { core.requestClose() }

    /// Subscribes the group member to these topics (replacing an earlier subscription).
    public func subscribe(_ topics: [String]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.subscribe(topics) }
    }

    /// Reads these partitions from these offsets without joining the group (manual assignment;
    /// use instead of ``subscribe(_:)``). ``TopicPartitionOffset/beginning`` and
    /// ``TopicPartitionOffset/end`` are the logical offsets. An empty list unassigns.
    public func assign(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.assign(offsets) }
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

    /// Stores explicit offsets (each the next offset to read).
    public func store(offsets: [TopicPartitionOffset]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.store(offsets) }
        core.remember(offsets)
    }

    /// Commits the stored offsets and waits for the broker's answer.
    public func commit() async throws(KafkaError) {
        let consumer = core.consumer
        try await BlockingExecutor.run { () throws(KafkaError) in try consumer.client.using { () throws(KafkaError) in try consumer.commit(nil) } }
    }

    /// Commits these offsets (each the next offset to read) and waits for the broker's answer.
    public func commit(_ offsets: [TopicPartitionOffset]) async throws(KafkaError) {
        let consumer = core.consumer
        try await BlockingExecutor.run { () throws(KafkaError) in try consumer.client.using { () throws(KafkaError) in try consumer.commit(offsets) } }
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

    /// The partitions currently assigned to this member.
    public func assignment() throws(KafkaError) -> [TopicPartition] {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.assignment() }
    }

    /// Stops fetching from these partitions (the assignment is kept).
    /// The group membership to send with a transaction's offsets (``KafkaProducer/sendOffsetsToTransaction(_:group:timeout:)``).
    public func groupMetadata() throws(KafkaError) -> ConsumerGroupMetadata {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.groupMetadata() }
    }

    /// Moves the read position of assigned partitions (e.g. back to the first input of an aborted
    /// transaction). Records fetched before may still arrive once, from batches already handed out.
    public func seek(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.seek(offsets) }
    }

    /// Stops fetching these partitions until ``resume(_:)``. librdkafka also throws away what it
    /// has fetched ahead for them (a batch already handed out is not affected), and the resume
    /// fetches it again from the application's position (librdkafka issues #1849, #5343): do not
    /// pause as a matter of course for flow control; stop asking for events instead.
    public func pause(_ partitions: [TopicPartition]) throws(KafkaError) {
        try core.consumer.client.using { () throws(KafkaError) in try core.consumer.pause(partitions) }
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

    /// librdkafka's latest statistics, when ``ConsumerConfiguration/statisticsInterval`` is set.
    public var statistics: KafkaStatistics? { core.consumer.rebalance.statistics.withLock { $0 } }

    /// Ends the event sequence, commits stored offsets, and leaves the group, within the deadline.
    /// Throws ``KafkaError/Code/timedOut`` when the deadline passes first (the close goes on in
    /// the background).
    public func close(deadline: Duration = .seconds(10)) async throws(KafkaError) {
        let core = self.core
        let outcome = await Deadline.race(deadline) { await core.close() }
        switch outcome {
        case .none: throw KafkaError.timedOut("closing the consumer")
        case .some(.some(let error)): throw error
        case .some(.none): return
        }
    }
}

/// The consumer's poll thread and the hand-over between it and the application.
///
/// State lives behind `condition`; the poll thread waits on it for demand, the application's
/// `next()` signals it. `outbox` is touched only by the poll thread (also from inside the
/// rebalance callback, which librdkafka runs on the polling thread).
final class ConsumerCore: @unchecked Sendable {
    let consumer: RDKafkaConsumer
    let maxBatchSize: Int
    private let condition = NSCondition()
    // Guarded by `condition`:
    private var demand: CheckedContinuation<ConsumerEvent?, any Error>?
    private var closing = false
    private var closed = false
    private var terminalError: KafkaError?
    private var closeWaiters: [CheckedContinuation<KafkaError?, Never>] = []
    private var closeResult: KafkaError?? = .none
    /// Set by the poll thread once it stopped polling to close; no wake-up after that.
    private var finishing = false
    // Poll thread only:
    private var outbox: [ConsumerEvent] = []
    private var pendingBatch: [ConsumerRecord] = []
    /// Partitions revoked by a rebalance callback that librdkafka served from inside
    /// `rd_kafka_consume_batch_queue`: records of theirs that the same call returned must not be
    /// handed out after the `.revoked` event. They are dropped (never stored, so the next owner
    /// reads them again).
    private var revokedWhileDraining: Set<TopicPartition> = []
    private var names = RDKafkaConsumer.TopicNames()

    init(consumer: RDKafkaConsumer, maxBatchSize: Int) {
        self.consumer = consumer
        self.maxBatchSize = maxBatchSize
    }

    /// Rebalance callbacks begun so far (tests wait for one while the application is busy).
    let rebalanceCallbacks = Atomic<Int>(0)

    func start() {
        consumer.rebalance.handler = { [unowned self] assigned, partitions in
            rebalanceCallbacks.add(1)
            // Everything polled before the rebalance goes out first, then the rebalance event;
            // the assignment changes only once the application asks for the next event.
            if !pendingBatch.isEmpty {
                outbox.append(.records(pendingBatch))
                pendingBatch = []
            }
            if !assigned { revokedWhileDraining.formUnion(partitions) }
            if isClosing {
                // Closing (rd_kafka_consumer_close revokes everything): nobody acknowledges any
                // more. Commit what the application stored while the partitions are still ours
                // and the generation is valid; a commit after the revocation would fail with
                // ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS and the stored offsets be lost.
                if !assigned { commitOnClose() }
                return
            }
            outbox.append(assigned ? .assigned(partitions) : .revoked(partitions))
            // The callback may come while the next batch is being fetched ahead, with nobody
            // waiting: everything goes out in order, each event when the application asks.
            var open = true
            while open, !outbox.isEmpty {
                open = waitForDemand()
                if open { deliverNext() }
            }
            // The application has the event; wait until it asks for the next one (its
            // acknowledgement), or closes instead: then what it stored meanwhile is committed
            // here, while the partitions are still ours.
            if !open || !waitForDemand() {
                if !assigned { commitOnClose() }
            } else if !assigned {
                commitRevoked(partitions)
            }
        }
        let thread = Thread { [self] in run() }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    // MARK: application side

    func next() async throws(KafkaError) -> ConsumerEvent? {
        // A task cancelled while it handled the last event ends the sequence here: the
        // cancellation handler below only fires for a wait that is already registered.
        if Task.isCancelled { return nil }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ConsumerEvent?, any Error>) in
                    condition.lock()
                    if let terminalError {
                        condition.unlock()
                        continuation.resume(throwing: terminalError)
                    } else if closing || closed {
                        condition.unlock()
                        continuation.resume(returning: nil)
                    } else if demand != nil {
                        condition.unlock()
                        continuation.resume(throwing: KafkaError(code: .other, message: "a KafkaConsumer supports one iteration at a time"))
                    } else {
                        demand = continuation
                        condition.signal()
                        condition.unlock()
                    }
                }
            } onCancel: {
                condition.lock()
                let pending = demand
                demand = nil
                condition.unlock()
                pending?.resume(returning: nil)
            }
        } catch let error as KafkaError {
            throw error
        } catch {
            throw KafkaError(code: .other, message: "\(error)")
        }
    }

    /// Ends the sequence and makes the poll thread close the consumer. Returns the close's error.
    func close() async -> KafkaError? {
        await withCheckedContinuation { continuation in
            condition.lock()
            if case .some(let result) = closeResult {
                condition.unlock()
                continuation.resume(returning: result)
                return
            }
            closeWaiters.append(continuation)
            let pending = beginClosing()
            // Under the lock, so never once the poll thread is in `finishClose`: a yield that
            // reached `rd_kafka_consumer_close` would end its wait for the TERMINATE reply and
            // leave the close half done (`_TIMED_OUT`, then a destroy that overruns the deadline).
            if !finishing { consumer.wakePoll() }
            condition.unlock()
            pending?.resume(returning: nil)
        }
    }

    func requestClose() {
        condition.lock()
        let pending = beginClosing()
        condition.unlock()
        pending?.resume(returning: nil)
    }

    /// Called with `condition` held.
    private func beginClosing() -> CheckedContinuation<ConsumerEvent?, any Error>? {
        closing = true
        condition.broadcast()
        defer { demand = nil }
        return demand
    }

    // MARK: poll thread

    private func run() {
        // One batch ahead: the next one is fetched and copied while the application works on
        // the last, so that it never waits for the copy (nor for this thread to be scheduled).
        while !isClosing {
            if outbox.isEmpty {
                fill()
                consumer.client.drainLogs()
            }
            guard waitForDemand() else { break }
            if !outbox.isEmpty { deliverNext() }
        }
        condition.lock()
        finishing = true
        condition.unlock()
        finishClose()
    }

    /// Waits until the application wants an event (true) or the consumer is closing (false).
    private func waitForDemand() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while demand == nil && !closing { condition.wait() }
        return !closing
    }

    /// Hands the first outbox event to the waiting application (after ``waitForDemand()`` said
    /// it waits; only `next()` sets a demand and only this thread takes it).
    private func deliverNext() {
        condition.lock()
        guard let continuation = demand else {
            condition.unlock()
            return
        }
        demand = nil
        condition.unlock()
        continuation.resume(returning: outbox.removeFirst())
    }

    /// Polls until there is something to deliver (or the consumer closes or fails): waits for
    /// the first message, then takes whatever else is already fetched, up to the batch size.
    /// Puts it in the outbox; does not deliver.
    private func fill() {
        pendingBatch.reserveCapacity(min(maxBatchSize, 1024))
        while outbox.isEmpty, pendingBatch.isEmpty {
            if isClosing { return }
            guard let polled = consumer.poll(timeoutMilliseconds: 100, names: &names) else {
                consumer.client.drainLogs()
                continue
            }
            handle(polled)
            while outbox.isEmpty, pendingBatch.count < maxBatchSize {
                let taken = drainFetched(limit: maxBatchSize - pendingBatch.count)
                if taken == 0 { break }
            }
            if terminalError != nil { return }
        }
        // Records polled before an end-of-partition marker come first.
        if !pendingBatch.isEmpty {
            outbox.insert(.records(pendingBatch), at: 0)
            pendingBatch = []
        }
    }

    /// Takes what is already fetched, appending records to `pendingBatch`. The rebalance
    /// callback may run inside the C call and flush `pendingBatch`: records are appended only
    /// after the call, through a closure, so the two never overlap. Poll thread only.
    private func drainFetched(limit: Int) -> Int {
        revokedWhileDraining.removeAll(keepingCapacity: true)
        var others: [RDKafkaPolled] = []
        var names = self.names
        let taken = consumer.drainFetched(
            limit: limit, names: &names,
            record: { record in
                if revokedWhileDraining.isEmpty || !revokedWhileDraining.contains(record.topicPartition) {
                    pendingBatch.append(record)
                }
            },
            other: { others.append($0) })
        self.names = names
        for event in others { handle(event) }
        return taken
    }

    /// Poll thread only.
    private func handle(_ polled: RDKafkaPolled) {
        switch polled {
        case .record(let record):
            pendingBatch.append(record)
        case .endOfPartition(let end):
            outbox.append(.endOfPartition(end))
        case .error(let error):
            if let fatal = consumer.client.fatalError() ?? (error.isFatal ? error : nil) {
                fail(with: fatal)
            } else {
                consumer.client.logger.warning("consumer error: \(error)")
            }
        }
    }

    /// Set by `commitOnClose` (poll thread only).
    private var closeCommitError: KafkaError?
    /// The latest offset the application stored per partition, so a close that finds the
    /// group rebalancing can still commit them once the rebalance is over (librdkafka drops
    /// stored offsets of revoked partitions).
    private let stored = Mutex<[TopicPartition: Int64]>([:])

    func remember(_ offsets: [TopicPartitionOffset]) {
        stored.withLock { s in for o in offsets { s[o.topicPartition] = Swift.max(s[o.topicPartition] ?? -1, o.offset) } }
    }

    /// Commits what the application stored for partitions it is giving up, before they go:
    /// stored offsets of a revoked partition are dropped by librdkafka, so an application that
    /// moved on without committing would otherwise have its work done again. Poll thread only.
    private func commitRevoked(_ partitions: [TopicPartition]) {
        let offsets = stored.withLock { s in
            partitions.compactMap { tp in s.removeValue(forKey: tp).map { TopicPartitionOffset(tp.topic, tp.partition, offset: $0) } }
        }
        guard !offsets.isEmpty else { return }
        do {
            try consumer.commit(offsets)
        } catch {
            // A lost assignment: the partitions are someone else's already; they read from the last commit.
            consumer.client.logger.warning("commit of revoked partitions failed: \(error)")
        }
    }

    /// The close found the group rebalancing: lets the rebalance finish (serving its callbacks
    /// without waiting for the application; fetched records are dropped, they are not stored),
    /// then commits the remembered offsets explicitly under the new generation. Poll thread only.
    private func commitAfterRebalance(deadline: ContinuousClock.Instant) -> KafkaError? {
        // Not waiting for an assignment callback: a cooperative rebalance that keeps the same
        // partitions calls back with nothing new. The commit itself says when the group settled.
        var lastError: KafkaError?
        while ContinuousClock.now < deadline {
            _ = consumer.poll(timeoutMilliseconds: 100, names: &names)
            let offsets = stored.withLock { $0.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) } }
            guard !offsets.isEmpty else { return nil }
            do {
                try consumer.commit(offsets)
                consumer.client.logger.info("committed stored offsets after the rebalance", metadata: ["partitions": "\(offsets.count)"])
                return nil
            } catch where error.isRebalanceInProgress {
                lastError = error
            } catch {
                return error
            }
        }
        return lastError ?? KafkaError.timedOut("waiting for the group to settle before the final commit")
    }

    /// Commits stored offsets from inside the revocation of a closing consumer, retrying while
    /// the group is still settling a rebalance. Poll thread only.
    private func commitOnClose() {
        do {
            try consumer.commit(nil)
            closeCommitError = nil
        } catch {
            closeCommitError = error
            consumer.client.logger.info("commit in the revocation failed: \(error)")
        }
    }

    private var isClosing: Bool {
        condition.lock()
        defer { condition.unlock() }
        return closing
    }

    private func fail(with error: KafkaError) {
        condition.lock()
        terminalError = error
        let pending = demand
        demand = nil
        condition.unlock()
        pending?.resume(throwing: error)
    }

    /// Commits what the application stored, leaves the group (the rebalance callback sees
    /// `closing` and revokes without waiting for the application), and destroys the handle.
    private func finishClose() {
        var result: KafkaError?
        var rebalancing = closeCommitError?.isRebalanceInProgress ?? false
        do {
            try consumer.commit(nil)
        } catch where error.isRebalanceInProgress {
            rebalancing = true
        } catch {
            result = error
            consumer.client.logger.warning("commit on close failed: \(error)")
        }
        if rebalancing {
            // The group is rebalancing and refuses commits until it settles.
            consumer.client.logger.info("closing during a rebalance: committing once it settles")
            if let error = commitAfterRebalance(deadline: .now + .seconds(8)) {
                result = result ?? error
                consumer.client.logger.warning("commit on close failed: \(error)")
            }
            closeCommitError = nil
        }
        do { try consumer.close() } catch { result = result ?? error }
        if let error = closeCommitError, !error.isRebalanceInProgress { result = result ?? error }
        consumer.client.drainLogs()
        // Destroyed here, before close() returns, so that a program can exit right after it.
        consumer.destroy()
        condition.lock()
        closed = true
        closeResult = .some(result)
        let waiters = closeWaiters
        closeWaiters = []
        condition.unlock()
        for waiter in waiters { waiter.resume(returning: result) }
    }
}
