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
///
/// Position changes (``KafkaConsumer/seek(_:)``, ``KafkaConsumer/assign(_:)``) are commands the
/// poll thread carries out between two polls: it drops what it fetched for the old positions
/// and then calls librdkafka, whose op-version barrier drops what librdkafka itself fetched.
/// Everything fetched before the command is gone; everything after it is for the new position.
/// (A seek made on another thread could not tell apart the records a poll returned just before
/// it from those returned just after.)
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
    /// Position changes waiting for the poll thread.
    private var commands: [Command] = []
    /// The poll thread is inside a rebalance callback, waiting for the application: commands
    /// are carried out when the callback returns (the poll that served it may still return
    /// records fetched before them, which they must drop).
    private var inRebalance = false
    /// An assignment the application is handling (until it is made): where it wants each
    /// partition to start, which it paused, and offsets it stored for them.
    private var assigning: (partitions: [TopicPartition], answer: RDKafkaAssignmentAnswer, stores: [TopicPartitionOffset])?
    /// The error of a command carried out after a rebalance, for the next `next()`.
    private var deferredError: KafkaError?
    /// Events handed to the application so far.
    private var deliveredEvents = 0
    // Poll thread only:
    private var outbox: [ConsumerEvent] = [] { didSet { bufferedEvents.store(outbox.count, ordering: .relaxed) } }
    /// Events fetched ahead and not handed out yet (tests wait on it).
    let bufferedEvents = Atomic<Int>(0)
    private var pendingBatch: [ConsumerRecord] = []
    /// Partitions revoked by a rebalance callback that librdkafka served from inside
    /// `rd_kafka_consume_batch_queue`: records of theirs that the same call returned must not be
    /// handed out after the `.revoked` event. They are dropped (never stored, so the next owner
    /// reads them again).
    private var revokedWhileDraining: Set<TopicPartition> = []
    private var names = RDKafkaConsumer.ConversionCache()

    /// A position change, and who waits for it (nil: nobody, it was deferred past a rebalance):
    /// its error, and how many events had been handed out when it was made.
    struct Command {
        enum Kind {
            case seek([TopicPartitionOffset])
            case assign([TopicPartitionOffset])
        }
        var kind: Kind
        var done: CheckedContinuation<(KafkaError?, Int), Never>?
    }

    init(consumer: RDKafkaConsumer, maxBatchSize: Int) {
        self.consumer = consumer
        self.maxBatchSize = maxBatchSize
    }

    /// Rebalance callbacks begun so far (tests wait for one while the application is busy).
    let rebalanceCallbacks = Atomic<Int>(0)
    /// Partitions lost and not assigned again (written by the poll thread, read by anyone).
    let lostPartitions = Mutex<Set<TopicPartition>>([])

    func start() {
        consumer.rebalance.handler = { [unowned self] kind, partitions, assignment in
            rebalanceCallbacks.add(1)
            // Everything polled before the rebalance goes out first, then the rebalance event;
            // the assignment changes only once the application asks for the next event.
            if !pendingBatch.isEmpty {
                outbox.append(.records(pendingBatch))
                pendingBatch = []
            }
            if kind != .assigned { revokedWhileDraining.formUnion(partitions) }
            switch kind {
            case .lost:
                forgetStored(partitions)
                lostPartitions.withLock { $0.formUnion(partitions) }
            case .assigned:
                lostPartitions.withLock { $0.subtract(partitions) }
            case .revoked:
                break
            }
            if isClosing {
                // Closing (rd_kafka_consumer_close revokes everything): nobody acknowledges any
                // more. Commit what the application stored while the partitions are still ours
                // and the generation is valid; a commit after the revocation would fail with
                // ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS and the stored offsets be lost.
                if kind == .revoked { commitOnClose() }
                assignment?.make(.init())
                return
            }
            condition.lock()
            inRebalance = true
            if kind == .assigned { assigning = (partitions, RDKafkaAssignmentAnswer(), []) }
            condition.unlock()
            switch kind {
            case .assigned: outbox.append(.assigned(partitions))
            case .revoked: outbox.append(.revoked(partitions))
            case .lost: outbox.append(.lost(partitions))
            }
            // The callback may come while the next batch is being fetched ahead, with nobody
            // waiting: everything goes out in order, each event when the application asks.
            var open = true
            while open, !outbox.isEmpty {
                open = waitForDemand(serving: false)
                if open {
                    // A seek made while the application handled the events before this one.
                    dropForPendingCommands()
                    deliverNext()
                }
            }
            // The application has the event; wait until it asks for the next one (its
            // acknowledgement), or closes instead: then what it stored meanwhile is committed
            // here, while the partitions are still ours.
            let acknowledged = open && waitForDemand(serving: false)
            condition.lock()
            inRebalance = false
            let answer = assigning?.answer ?? RDKafkaAssignmentAnswer()
            condition.unlock()
            if let assignment {
                // Offsets stored while the assignment is being made are stored once it is.
                assignment.make(answer)
                condition.lock()
                let stores = assigning?.stores ?? []
                assigning = nil
                condition.unlock()
                if !stores.isEmpty { try? consumer.client.using { () throws(KafkaError) in try consumer.store(stores) } }
            }
            switch kind {
            case .revoked: if acknowledged { commitRevoked(partitions) } else { commitOnClose() }
            case .lost, .assigned: break
            }
        }
        let thread = Thread { [self] in run() }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    // MARK: application side

    func next() async throws(KafkaError) -> ConsumerEvent? {
        // A task cancelled while it handled the last event ends the sequence here: the
        // cancellation handler below only resumes a wait that is already registered.
        if Task.isCancelled { return nil }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ConsumerEvent?, any Error>) in
                    condition.lock()
                    if let terminalError {
                        condition.unlock()
                        continuation.resume(throwing: terminalError)
                    } else if let error = deferredError {
                        deferredError = nil
                        condition.unlock()
                        continuation.resume(throwing: error)
                    } else if closing || closed || Task.isCancelled {
                        // Cancelled since the check above: the handler may have run already,
                        // with no wait to resume (checked under the lock the handler takes).
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

    /// The partitions of an assignment the application is handling.
    var partitionsBeingAssigned: [TopicPartition] {
        condition.lock()
        defer { condition.unlock() }
        return assigning?.partitions ?? []
    }

    /// Seeks of partitions the application is being assigned become their start offsets; returns
    /// the other seeks (nil when there are none).
    func startAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset]? {
        condition.lock()
        defer { condition.unlock() }
        guard let partitions = assigning?.partitions else { return offsets.isEmpty ? nil : offsets }
        var rest: [TopicPartitionOffset] = []
        for o in offsets {
            if partitions.contains(o.topicPartition) { assigning!.answer.starts[o.topicPartition] = o.offset } else { rest.append(o) }
        }
        return rest.isEmpty ? nil : rest
    }

    /// Offsets stored for partitions of an assignment not made yet are stored once it is; returns the others.
    func storeAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset] {
        condition.lock()
        defer { condition.unlock() }
        guard let assigning = assigning?.partitions else { return offsets }
        let mine = offsets.filter { assigning.contains($0.topicPartition) }
        self.assigning!.stores += mine
        return mine.isEmpty ? offsets : offsets.filter { !assigning.contains($0.topicPartition) }
    }

    /// Pauses of partitions the application is being assigned are made with the assignment;
    /// returns the others.
    func pauseAssigned(_ partitions: [TopicPartition]) -> [TopicPartition] {
        condition.lock()
        defer { condition.unlock() }
        guard let assigning = assigning?.partitions else { return partitions }
        let mine = partitions.filter(assigning.contains)
        self.assigning!.answer.paused += mine
        return partitions.filter { !assigning.contains($0) }
    }

    /// Events handed to the application so far.
    var eventsDelivered: Int {
        condition.lock()
        defer { condition.unlock() }
        return deliveredEvents
    }

    /// Hands a position change to the poll thread and waits until it is made (or, during a
    /// rebalance the application is handling, returns at once: it is made when the callback
    /// returns, before any further event). Returns how many events had been handed out then.
    @discardableResult
    func perform(_ kind: Command.Kind) async throws(KafkaError) -> Int {
        let (error, delivered): (KafkaError?, Int) = await withCheckedContinuation { (continuation: CheckedContinuation<(KafkaError?, Int), Never>) in
            condition.lock()
            if closing || closed {
                condition.unlock()
                continuation.resume(returning: (KafkaError.closed, 0))
                return
            }
            if inRebalance {
                commands.append(Command(kind: kind, done: nil))
                let delivered = deliveredEvents
                condition.unlock()
                continuation.resume(returning: (nil, delivered))
                return
            }
            commands.append(Command(kind: kind, done: continuation))
            condition.broadcast()
            // Under the lock, as in `close()`: never once the poll thread is in `finishClose`.
            if !finishing { consumer.wakePoll() }
            condition.unlock()
        }
        if let error { throw error }
        return delivered
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
            guard waitForDemand(serving: true) else { break }
            serveCommands()
            if !outbox.isEmpty { deliverNext() }
        }
        condition.lock()
        finishing = true
        let orphaned = commands
        commands = []
        condition.unlock()
        for command in orphaned { command.done?.resume(returning: (KafkaError.closed, 0)) }
        finishClose()
    }

    /// Waits until the application wants an event (true) or the consumer is closing (false).
    /// `serving`: carries out position changes that come meanwhile (not inside a rebalance callback).
    private func waitForDemand(serving: Bool) -> Bool {
        condition.lock()
        while !closing {
            if serving, !commands.isEmpty {
                condition.unlock()
                serveCommands()
                condition.lock()
                continue
            }
            if demand != nil { break }
            condition.wait()
        }
        let open = !closing
        condition.unlock()
        return open
    }

    /// Carries out the position changes that are waiting: drops what was fetched for the old
    /// positions, then calls librdkafka. Poll thread only, never inside a rebalance callback.
    private func serveCommands() {
        condition.lock()
        let waiting = commands
        commands = []
        condition.unlock()
        for command in waiting {
            drop(for: command.kind)
            var error: KafkaError?
            do {
                switch command.kind {
                case .seek(let offsets): try consumer.client.using { () throws(KafkaError) in try consumer.seek(offsets) }
                case .assign(let offsets): try consumer.client.using { () throws(KafkaError) in try consumer.assign(offsets) }
                }
            } catch let e {
                error = e
            }
            if let done = command.done {
                done.resume(returning: (error, eventsDelivered))
            } else if let error {
                consumer.client.logger.warning("a seek after the rebalance failed: \(error)")
                condition.lock()
                deferredError = deferredError ?? error
                condition.unlock()
            }
        }
    }

    /// Inside a rebalance callback: drops what was fetched for positions the application has
    /// changed meanwhile (librdkafka is called once the callback returns).
    private func dropForPendingCommands() {
        condition.lock()
        let waiting = commands
        condition.unlock()
        for command in waiting { drop(for: command.kind) }
    }

    /// Drops fetched, undelivered records (and end-of-partition events) of the partitions a
    /// command moves; an assignment replaces everything.
    private func drop(for kind: Command.Kind) {
        let moved: Set<TopicPartition>?
        switch kind {
        case .seek(let offsets): moved = Set(offsets.map(\.topicPartition))
        case .assign: moved = nil
        }
        func stale(_ tp: TopicPartition) -> Bool { moved?.contains(tp) ?? true }
        pendingBatch.removeAll { stale($0.topicPartition) }
        outbox = outbox.compactMap { event in
            switch event {
            case .records(let batch):
                let kept = batch.filter { !stale($0.topicPartition) }
                return kept.isEmpty ? nil : .records(kept)
            case .endOfPartition(let end):
                return stale(end.topicPartition) ? nil : event
            case .assigned, .revoked, .lost:
                return event
            }
        }
    }

    /// Hands the first outbox event to the waiting application (after ``waitForDemand(serving:)``
    /// said it waits; only `next()` sets a demand and only this thread takes it).
    private func deliverNext() {
        condition.lock()
        guard let continuation = demand, !outbox.isEmpty else {
            condition.unlock()
            return
        }
        demand = nil
        deliveredEvents += 1
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
            serveCommands()
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
            // A seek that came during a rebalance this poll served: what the poll returned is
            // from before it.
            serveCommands()
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
    /// Assignment callbacks so far when a commit on close was first refused as mid-rebalance.
    private var refusedAtAssignment: Int?
    /// The latest offset the application stored per partition, so a close that finds the
    /// group rebalancing can still commit them once the rebalance is over (librdkafka drops
    /// stored offsets of revoked partitions).
    private let stored = Mutex<[TopicPartition: Int64]>([:])

    func remember(_ offsets: [TopicPartitionOffset]) {
        stored.withLock { s in for o in offsets { s[o.topicPartition] = Swift.max(s[o.topicPartition] ?? -1, o.offset) } }
    }

    /// Lost partitions: what was stored for them can never be committed by this member.
    private func forgetStored(_ partitions: [TopicPartition]) {
        stored.withLock { s in for tp in partitions { s[tp] = nil } }
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
    /// then commits the remembered offsets of the partitions this member holds under the new
    /// generation. The others belong to another member now, which may have committed past them:
    /// a commit of ours would move their offsets back (their new owner reads from the last
    /// commit: at least once). Poll thread only.
    private func commitAfterRebalance(deadline: ContinuousClock.Instant, assignmentsBefore: Int) -> KafkaError? {
        var lastError: KafkaError?
        while ContinuousClock.now < deadline {
            _ = consumer.poll(timeoutMilliseconds: 100, names: &names)
            guard !stored.withLock({ $0.isEmpty }) else { return nil }
            // What this member holds now: a commit of them succeeds only once the group has
            // settled with this member in it, and then they are its own.
            guard let held = try? Set(consumer.assignment()) else { continue }
            let offsets = stored.withLock { s in
                s.filter { held.contains($0.key) }.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
            }
            if offsets.isEmpty {
                // Holding none of them: once the rebalance has handed out partitions (an eager one
                // always calls back; a cooperative one too, with nothing new when nothing moved),
                // there is nothing to commit.
                if consumer.rebalance.assignments.value > assignmentsBefore {
                    consumer.client.logger.info("after the rebalance this member holds none of the partitions it stored offsets for; their new owners read from the last commit")
                    return nil
                }
                continue
            }
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
            if error.isRebalanceInProgress { refusedAtAssignment = refusedAtAssignment ?? consumer.rebalance.assignments.value }
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
            refusedAtAssignment = refusedAtAssignment ?? consumer.rebalance.assignments.value
        } catch {
            result = error
            consumer.client.logger.warning("commit on close failed: \(error)")
        }
        if rebalancing {
            // The group is rebalancing and refuses commits until it settles.
            consumer.client.logger.info("closing during a rebalance: committing once it settles")
            if let error = commitAfterRebalance(deadline: .now + .seconds(8), assignmentsBefore: refusedAtAssignment ?? consumer.rebalance.assignments.value) {
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
