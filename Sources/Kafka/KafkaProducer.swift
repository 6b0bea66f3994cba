import Foundation
import Logging
import Synchronization

/// An idempotent Kafka producer.
///
/// Three ways to send:
/// - ``send(_:)-(ProducerRecord)`` awaits one message's delivery;
/// - ``send(_:)-([ProducerRecord])`` enqueues many and awaits them together (one wake-up per batch);
/// - ``enqueue(_:)`` returns at once; its report arrives on ``deliveryReports``.
///
/// When librdkafka's local queue is full, sending waits for deliveries to make room instead of failing.
/// Delivery reports are served by a dedicated thread, or by jobs on an executor of the caller's
/// (``DeliveryReportServing``); no blocking librdkafka call runs on the cooperative pool.
public final class KafkaProducer: Sendable {
    private let core: ProducerCore
    /// Reports for messages sent with ``enqueue(_:)``, in batches. Consume it if you use `enqueue`.
    public let deliveryReports: AsyncStream<[DeliveryReport]>

    public init(
        configuration: ProducerConfiguration, logger: Logger = Logger(label: "kafka.producer"), serving: DeliveryReportServing = .thread
    ) throws(KafkaError) {
        let client = try RDKafkaClient(kind: .producer, properties: configuration.librdkafkaProperties(), logger: logger) { conf in
            RDKafkaClient.enableDeliveryReportEvents(conf)
        }
        let (stream, continuation) = AsyncStream<[DeliveryReport]>.makeStream()
        self.deliveryReports = stream
        self.core = ProducerCore(client: client, reports: continuation, serving: serving)
        core.startServing()
    }

    /// A producer that was not closed stops serving reports here (its poll thread ends, or
    /// librdkafka's wake-up is turned off); its handle is destroyed when the thread or the last
    /// scheduled job lets go of it. Close producers before the program exits.
    deinit { core.stopServing() }

    /// Sends one record and waits for its delivery. Throws the delivery error.
    public func send(_ record: ProducerRecord) async throws(KafkaError) -> DeliveryReport {
        let reports = try await send([record])
        if let error = reports[0].error { throw error }
        return reports[0]
    }

    /// Enqueues all records (in order) and waits until each is delivered or failed. The report at
    /// index `i` belongs to `records[i]`; per-message failures are in ``DeliveryReport/error``.
    /// Throws only when the producer is closed before the records could be enqueued.
    public func send(_ records: [ProducerRecord]) async throws(KafkaError) -> [DeliveryReport] {
        try await submit(records).reports()
    }

    /// Enqueues all records (in order) and returns without waiting for delivery; await
    /// ``DeliveryTicket/reports()`` for the outcome. Submitting batch after batch keeps their
    /// order within each partition while several are in flight.
    public func submit(_ records: [ProducerRecord]) async throws(KafkaError) -> DeliveryTicket {
        try await submit(ProducerBatch(records))
    }

    /// ``submit(_:)-([ProducerRecord])`` for records already written into one buffer (a
    /// worker's outputs): the report at index `i` belongs to record `i` of the batch.
    public func submit(_ batch: ProducerBatch) async throws(KafkaError) -> DeliveryTicket {
        let (ticket, stoppedAt) = try submitUntilFull(batch)
        guard var index = stoppedAt else { return ticket }
        // librdkafka's queue is full: the rest waits for room, in order.
        let batchID = ticket.batchID!
        guard core.client.enterUse() else {
            for i in index..<batch.count { core.fail(token: batchID << ProducerCore.indexBits | UInt64(i), error: KafkaError.closed) }
            return ticket
        }
        defer { core.client.leaveUse() }
        var topics = TopicHandleCache()
        while index < batch.count {
            let token = batchID << ProducerCore.indexBits | UInt64(index)
            if let error = await core.produceWhenThereIsRoom(batch, index: index, token: token, topics: &topics) { core.fail(token: token, error: error) }
            index += 1
        }
        return ticket
    }

    /// The synchronous part of ``submit(_:)-(ProducerBatch)``: enqueues records in order until
    /// librdkafka's queue is full, never waiting. Returns the ticket for all of them and the
    /// index of the first record not enqueued (nil when all were); `submit` enqueues the rest as
    /// room frees up. (The hot path's instruction count, `scripts/bench-instructions`, measures this.)
    package func submitUntilFull(_ batch: ProducerBatch) throws(KafkaError) -> (ticket: DeliveryTicket, stoppedAt: Int?) {
        guard !batch.isEmpty else { return (DeliveryTicket(core: core, batchID: nil, count: 0), nil) }
        precondition(batch.count < ProducerCore.maxBatchSize, "a batch holds at most \(ProducerCore.maxBatchSize - 1) records")
        let batchID = try core.openBatch(count: batch.count)
        let ticket = DeliveryTicket(core: core, batchID: batchID, count: batch.count)
        // Holds the handle for the whole batch (close waits for it), one guard per batch, not per message.
        guard core.client.enterUse() else {
            for index in 0..<batch.count { core.fail(token: batchID << ProducerCore.indexBits | UInt64(index), error: KafkaError.closed) }
            return (ticket, nil)
        }
        defer { core.client.leaveUse() }
        var topics = TopicHandleCache()
        return batch.bytes.withUnsafeBytes { bytes in
            var index = 0
            while index < batch.count {
                let token = batchID << ProducerCore.indexBits | UInt64(index)
                // Runs of records without headers or timestamps go in one call each.
                let runEnd = batch.plainRunEnd(from: index)
                if runEnd - index > 1 {
                    let full = core.client.produceRun(batch, index..<runEnd, bytes: bytes, firstToken: token, topics: &topics) { i, error in
                        core.fail(token: batchID << ProducerCore.indexBits | UInt64(i), error: error)
                    }
                    if let full { return (ticket, full) }
                    index = runEnd
                    continue
                }
                if let error = core.client.produce(batch, index: index, bytes: bytes, token: token, topics: &topics) {
                    if error.code == .queueFull { return (ticket, index) }
                    core.fail(token: token, error: error)
                }
                index += 1
            }
            return (ticket, nil)
        }
    }

    /// Enqueues a record and returns its id at once; the report arrives on ``deliveryReports``.
    public func enqueue(_ record: ProducerRecord) async throws(KafkaError) -> UInt64 {
        let id = try core.nextFireAndForgetToken()
        guard core.client.enterUse() else { throw KafkaError.closed }
        defer { core.client.leaveUse() }
        var topics = TopicHandleCache()
        let batch = ProducerBatch([record])
        var error = batch.bytes.withUnsafeBytes { core.client.produce(batch, index: 0, bytes: $0, token: id, topics: &topics) }
        if error?.code == .queueFull {
            error = await core.produceWhenThereIsRoom(batch, index: 0, token: id, topics: &topics)
        }
        if let error {
            if core.isClosed { throw error }
            core.fail(token: id, error: error)
        }
        return id & ~ProducerCore.fireAndForgetFlag
    }

    // MARK: Transactions (``ProducerConfiguration/transactionalID``)

    /// Registers the transactional id with the coordinator, fencing an older producer with the
    /// same id and aborting its open transaction. Call once before the first transaction.
    public func initTransactions(timeout: Duration = .seconds(30)) async throws(KafkaError) {
        let client = core.client, ms = timeout.timeoutMilliseconds
        try await BlockingExecutor.run { () throws(KafkaError) in try client.using { () throws(KafkaError) in try client.initTransactions(timeoutMilliseconds: ms) } }
    }

    /// Opens a transaction: every record sent until it commits or aborts belongs to it. Local; does not wait.
    public func beginTransaction() throws(KafkaError) {
        try core.client.using { () throws(KafkaError) in try core.client.beginTransaction() }
    }

    /// Adds consumed input offsets (the next to read) to the open transaction: they are committed
    /// for the consumer's group if and only if the transaction commits.
    public func sendOffsetsToTransaction(
        _ offsets: [TopicPartitionOffset], group: ConsumerGroupMetadata, timeout: Duration = .seconds(30)
    ) async throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        let client = core.client, ms = timeout.timeoutMilliseconds
        try await BlockingExecutor.run { () throws(KafkaError) in
            try client.using { () throws(KafkaError) in try client.sendOffsetsToTransaction(offsets, group: group, timeoutMilliseconds: ms) }
        }
    }

    /// Delivers everything sent in the transaction, then commits it. A ``KafkaError/requiresAbort``
    /// error means the transaction must be aborted; ``KafkaError/isRetriable``, that the call may be repeated.
    public func commitTransaction(timeout: Duration = .seconds(30)) async throws(KafkaError) {
        let client = core.client, ms = timeout.timeoutMilliseconds
        try await BlockingExecutor.run { () throws(KafkaError) in try client.using { () throws(KafkaError) in try client.commitTransaction(timeoutMilliseconds: ms) } }
    }

    /// Aborts the open transaction: nothing sent in it becomes visible to `read_committed`
    /// readers, and its offsets are not committed. Undelivered records fail with a purge error.
    public func abortTransaction(timeout: Duration = .seconds(30)) async throws(KafkaError) {
        let client = core.client, ms = timeout.timeoutMilliseconds
        try await BlockingExecutor.run { () throws(KafkaError) in try client.using { () throws(KafkaError) in try client.abortTransaction(timeoutMilliseconds: ms) } }
    }

    /// librdkafka's latest statistics, when ``ProducerConfiguration/statisticsInterval`` is set.
    public var statistics: KafkaStatistics? { core.statistics.withLock { $0 } }

    /// Messages enqueued but not yet delivered or failed.
    public var inFlight: Int { (try? core.client.using { core.client.outQueueLength }) ?? 0 }

    /// The error that made this producer unusable, or nil while it works: a fatal error, or a
    /// delivery that failed because the broker fenced the producer or lost its producer id or
    /// sequence (`PRODUCER_FENCED`, `UNKNOWN_PRODUCER_ID`, `INVALID_PRODUCER_EPOCH`,
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`, …; librdkafka raises none of these as fatal for an
    /// idempotent producer, yet they never clear), or statistics that show librdkafka bumping
    /// the epoch of a producer id the broker lost, again and again (``EpochBumpWatch``; only
    /// with ``ProducerConfiguration/statisticsInterval`` set). Every record sent after it fails
    /// the same way; a new producer (a new producer id) is needed.
    public var unusable: KafkaError? {
        if let fatal = (try? core.client.using { core.client.fatalError() }) ?? nil { return fatal }
        return core.state.withLock { $0.unusable }
    }

    /// Fault injection: makes the producer fail fatally, as if the broker had caused it
    /// (`rd_kafka_test_fatal_error`; `rawCode` is a broker error code, e.g. 59 `UNKNOWN_PRODUCER_ID`).
    package func raiseFatalError(rawCode: Int32, reason: String) {
        try? core.client.using { core.client.raiseFatalError(rawCode: rawCode, reason: reason) }
    }

    /// Waits until everything enqueued is delivered or failed, or the deadline passes.
    public func flush(deadline: Duration) async throws(KafkaError) {
        let client = core.client
        let ms = deadline.timeoutMilliseconds
        if let error = try await BlockingExecutor.run({ () throws(KafkaError) in try client.using { client.flush(timeoutMilliseconds: ms) } }) {
            throw error
        }
    }

    /// Flushes within the deadline, fails whatever is still undelivered (``KafkaError/Code/delivery``
    /// reports with librdkafka's purge code), and stops the producer. Later sends throw ``KafkaError/Code/closed``.
    public func close(deadline: Duration = .seconds(10)) async {
        var flushError: KafkaError?
        do { try await flush(deadline: deadline) } catch { flushError = error }
        if let flushError {
            core.client.logger.warning("closing producer: \(flushError); purging undelivered messages")
            _ = try? core.client.using { core.client.purge() }
            // Purged messages still get reports; give the poll thread a moment to route them.
            try? await flush(deadline: .seconds(1))
        }
        await core.stop()
        let client = core.client
        await BlockingExecutor.run { client.destroy() }
    }
}

/// How a producer serves its delivery reports (and librdkafka's errors, statistics and logs).
public struct DeliveryReportServing: Sendable {
    enum Mode: Sendable {
        case thread
        case scheduled(@Sendable (@escaping @Sendable () -> Void) -> Void)
    }

    let mode: Mode

    /// The producer's own thread (`kafka-dr-poll`) waits in librdkafka's poll and routes reports
    /// as they come: each batch of reports wakes it, and it wakes whoever awaits them.
    public static var thread: Self { Self(mode: .thread) }

    /// No thread of the producer's own: when reports arrive in librdkafka's queue (it was
    /// empty), librdkafka's broker thread hands `schedule` a job that serves every report
    /// queued, without blocking. `schedule` must run the jobs one at a time, soon and off
    /// librdkafka's thread: an event loop's `execute`. A service whose requests await their
    /// reports on that loop (an HTTP endpoint's handlers) then gets them there, with no thread
    /// woken in between.
    public static func scheduled(_ schedule: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) -> Self {
        Self(mode: .scheduled(schedule))
    }
}

/// The delivery outcome of records handed to ``KafkaProducer/submit(_:)``.
public struct DeliveryTicket: Sendable {
    let core: ProducerCore
    let batchID: UInt64?
    let count: Int

    /// Increases with every submission to this producer: of two tickets, the one with the lower
    /// sequence had its records enqueued first (0: nothing was enqueued).
    public var sequence: UInt64 { batchID ?? 0 }

    /// Waits until every record is delivered or failed; the report at index `i` belongs to record `i`.
    /// Call it once. A cancelled task gets the reports at once, those still to come as
    /// ``KafkaError/Code/cancelled`` (such a record may still be delivered).
    public func reports() async -> [DeliveryReport] {
        guard let batchID else { return [] }
        return await core.awaitBatch(batchID, count: count)
    }
}

/// State shared by the producer's API and its poll thread.
final class ProducerCore: Sendable {
    static let indexBits: UInt64 = 24
    static let maxBatchSize = 1 << 24
    static let fireAndForgetFlag: UInt64 = 1 << 63

    struct PendingBatch {
        var reports: [DeliveryReport]
        var remaining: Int
        var continuation: CheckedContinuation<[DeliveryReport], Never>?
    }

    struct State {
        var batches: [UInt64: PendingBatch] = [:]
        var nextBatchID: UInt64 = 1
        var nextFireAndForget: UInt64 = 1
        var spaceWaiters: [CheckedContinuation<Void, Never>] = []
        /// Counts served delivery events; a sender that saw a full queue waits only if it has not moved.
        var deliveryGeneration: UInt64 = 0
        /// The first delivery error that means the producer cannot deliver any more.
        var unusable: KafkaError?
        var closed = false
        var pollThreadRunning = false
        var stopContinuation: CheckedContinuation<Void, Never>?
    }

    let client: RDKafkaClient
    let reports: AsyncStream<[DeliveryReport]>.Continuation
    let serving: DeliveryReportServing
    let state = Mutex(State())
    let stopRequested = Atomic<Bool>(false)
    /// `.scheduled` serving: the context librdkafka's wake-up callback holds (retained while
    /// the callback is on), and the buffer a serving job reads reports into (one job at a time).
    private let waker = Mutex<Unmanaged<ReportWaker>?>(nil)
    private let served = Mutex<[RDKafkaDelivery]>([])
    /// The latest librdkafka statistics (poll thread writes, anyone reads).
    let statistics = Mutex<KafkaStatistics?>(nil)
    /// Watches the statistics for librdkafka's epoch-bump loop (poll thread only).
    private let epochWatch = Mutex(EpochBumpWatch())

    init(client: RDKafkaClient, reports: AsyncStream<[DeliveryReport]>.Continuation, serving: DeliveryReportServing) {
        self.client = client
        self.reports = reports
        self.serving = serving
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    func openBatch(count: Int) throws(KafkaError) -> UInt64 {
        try state.withLock { s throws(KafkaError) in
            guard !s.closed else { throw KafkaError.closed }
            let id = s.nextBatchID
            s.nextBatchID += 1
            // Each report made in place (`map` made each one, then copied it into the array).
            let reports = [DeliveryReport](unsafeUninitializedCapacity: count) { buffer, initialized in
                for i in 0..<count { (buffer.baseAddress! + i).initialize(to: DeliveryReport(id: UInt64(i), partition: -1, offset: -1, error: nil)) }
                initialized = count
            }
            s.batches[id] = PendingBatch(reports: reports, remaining: count)
            return id
        }
    }

    func nextFireAndForgetToken() throws(KafkaError) -> UInt64 {
        try state.withLock { s throws(KafkaError) in
            guard !s.closed else { throw KafkaError.closed }
            defer { s.nextFireAndForget += 1 }
            return Self.fireAndForgetFlag | s.nextFireAndForget
        }
    }

    /// Called after librdkafka said its queue is full: waits for deliveries to make room and
    /// tries again. Returns nil when enqueued, else the error that is not "queue full".
    func produceWhenThereIsRoom(_ batch: ProducerBatch, index: Int, token: UInt64, topics: inout TopicHandleCache) async -> KafkaError? {
        while true {
            if isClosed { return KafkaError.closed }
            // Read the generation first, then try again: a delivery that freed room in between
            // makes this try succeed; one after it changes the generation we wait on.
            let generation = state.withLock { $0.deliveryGeneration }
            guard let error = batch.bytes.withUnsafeBytes({ client.produce(batch, index: index, bytes: $0, token: token, topics: &topics) }) else { return nil }
            guard error.code == .queueFull else { return error }
            if Task.isCancelled { return KafkaError.cancelled }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { s -> Bool in
                        if s.deliveryGeneration != generation || s.closed || Task.isCancelled { return true }
                        s.spaceWaiters.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            } onCancel: {
                // Every waiter tries again (a waiter only loses a turn): the cancelled one returns.
                let waiters = state.withLock { s in
                    defer { s.spaceWaiters.removeAll() }
                    return s.spaceWaiters
                }
                for waiter in waiters { waiter.resume() }
            }
        }
    }

    func fail(token: UInt64, error: KafkaError) {
        var one = [RDKafkaDelivery.notEnqueued(token: token)]
        route(&one, overrideError: error)
    }

    func awaitBatch(_ id: UInt64, count: Int) async -> [DeliveryReport] {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let done: [DeliveryReport]? = state.withLock { s in
                    guard let batch = s.batches[id] else {
                        // Swept by close() before anyone waited: none of it can be delivered any more.
                        return (0..<count).map { DeliveryReport(id: UInt64($0), partition: -1, offset: -1, error: KafkaError.closed) }
                    }
                    if batch.remaining == 0 {
                        s.batches[id] = nil
                        return batch.reports
                    }
                    if Task.isCancelled {
                        s.batches[id] = nil
                        return Self.cancellingPending(batch.reports)
                    }
                    s.batches[id]!.continuation = continuation
                    return nil
                }
                if let done { continuation.resume(returning: done) }
            }
        } onCancel: {
            // Later reports of the batch find no batch and are dropped.
            let waiting = state.withLock { s -> (CheckedContinuation<[DeliveryReport], Never>, [DeliveryReport])? in
                guard let batch = s.batches[id], let continuation = batch.continuation else { return nil }
                s.batches[id] = nil
                return (continuation, Self.cancellingPending(batch.reports))
            }
            if let (continuation, reports) = waiting { continuation.resume(returning: reports) }
        }
    }

    /// The reports with those still to come failed as cancelled.
    private static func cancellingPending(_ reports: [DeliveryReport]) -> [DeliveryReport] {
        var reports = reports
        for i in reports.indices where reports[i].partition < 0 && reports[i].offset < 0 && reports[i].error == nil {
            reports[i].error = KafkaError.cancelled
        }
        return reports
    }

    /// Routes reports to their batches (one lock per delivery event) and wakes waiters.
    /// Consecutive reports usually belong to one batch: it is taken out of the table once and
    /// put back when the batch changes. It is held in a plain variable, not an optional: a report
    /// written through `optional!` copied and destroyed the whole batch value per report
    /// (`scripts/bench-instructions process produce`).
    func route(_ deliveries: inout [RDKafkaDelivery], overrideError: KafkaError? = nil) {
        var finished: [(CheckedContinuation<[DeliveryReport], Never>, [DeliveryReport])] = []
        var loose: [DeliveryReport] = []
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { s in
            var currentID: UInt64 = 0
            var holding = false
            var current = PendingBatch(reports: [], remaining: 0, continuation: nil)
            func putBack() {
                guard holding else { return }
                holding = false
                if current.remaining == 0, let continuation = current.continuation {
                    finished.append((continuation, current.reports))
                } else {
                    s.batches[currentID] = current
                }
                current = PendingBatch(reports: [], remaining: 0, continuation: nil)
            }
            for d in deliveries {
                let error = overrideError ?? d.error
                if let error, s.unusable == nil, error.meansProducerUnusable { s.unusable = error }
                if d.token & Self.fireAndForgetFlag != 0 {
                    loose.append(DeliveryReport(id: d.token & ~Self.fireAndForgetFlag, partition: d.partition, offset: d.offset, error: error))
                    continue
                }
                let batchID = d.token >> Self.indexBits
                if !holding || batchID != currentID {
                    putBack()
                    // Taken out so that editing its reports does not copy the array.
                    guard let batch = s.batches.removeValue(forKey: batchID) else { continue }
                    current = batch
                    currentID = batchID
                    holding = true
                }
                let index = Int(d.token & (UInt64(Self.maxBatchSize) - 1))
                current.reports[index].partition = d.partition
                current.reports[index].offset = d.offset
                if let error { current.reports[index].error = error }  // nil already
                current.remaining -= 1
            }
            putBack()
            s.deliveryGeneration &+= 1
            defer { s.spaceWaiters.removeAll() }
            return s.spaceWaiters
        }
        for (continuation, reports) in finished { continuation.resume(returning: reports) }
        if !loose.isEmpty { reports.yield(loose) }
        for waiter in waiters { waiter.resume() }
    }

    /// Keeps the latest statistics, and makes the producer unusable when they show it stuck
    /// bumping its own epoch (``EpochBumpWatch``): its undelivered records are failed at once
    /// (purged) instead of when they time out, so that a ``ProducerSlot`` sends them again through
    /// a new producer id.
    func observe(_ stats: KafkaStatistics) {
        statistics.withLock { $0 = stats }
        guard let bumps = epochWatch.withLock({ $0.observe(producerID: stats.producerID, epoch: stats.producerEpoch, at: .now) }) else { return }
        let error = KafkaError(
            code: .delivery,
            message: "the broker keeps refusing this producer's id (UNKNOWN_PRODUCER_ID): librdkafka bumped its epoch \(bumps) times since the "
                + "last statistics; a new producer is needed",
            rdKafkaCode: RDKafkaError.unknownProducerID)
        let first = state.withLock { s in
            guard s.unusable == nil else { return false }
            s.unusable = error
            return true
        }
        guard first else { return }
        client.logger.error("\(error); its undelivered records are failed now")
        client.purge()
    }

    func startServing() {
        switch serving.mode {
        case .thread: startPolling()
        case .scheduled(let schedule):
            let context = Unmanaged.passRetained(ReportWaker(core: self, schedule: schedule))
            waker.withLock { $0 = context }
            client.wakeWhenQueued(wakeProducerCore, context: context.toOpaque())
            // Reports or logs queued before the callback was on would not call it.
            schedule { [self] in serveQueued() }
        }
    }

    /// `.scheduled` serving's job: serves every event queued (delivery reports, errors,
    /// statistics) and the log lines, without waiting. Whatever arrives after the queue was
    /// found empty calls the wake-up again.
    func serveQueued() {
        guard client.enterUse() else { return }
        defer { client.leaveUse() }
        served.withLock { buffer in
            while client.serveDeliveryReports(timeoutMilliseconds: 0, into: &buffer, statistics: { s in self.observe(s) }, deliver: { route(&$0) }) {}
        }
        client.drainLogs()
    }

    /// Turns librdkafka's wake-up callback off (none runs after this) and lets go of its context.
    private func stopWakeUps() {
        guard let context = waker.withLock({ w -> Unmanaged<ReportWaker>? in defer { w = nil }; return w }) else { return }
        if client.enterUse() {
            client.wakeWhenQueued(nil, context: nil)
            client.leaveUse()
        }
        context.release()
    }

    func startPolling() {
        state.withLock { $0.pollThreadRunning = true }
        let thread = Thread { [self] in
            // Named from inside (Foundation does not name a `Thread` on Linux), so that `top -H`
            // and perf tell it from the cooperative pool's threads, whose name it would inherit.
            Self.nameThisThread("kafka-dr-poll")
            var buffer: [RDKafkaDelivery] = []
            buffer.reserveCapacity(1024)
            while !stopRequested.load(ordering: .acquiring) {
                client.serveDeliveryReports(
                    timeoutMilliseconds: 100, into: &buffer, statistics: { s in self.observe(s) }
                ) { route(&$0) }
                client.drainLogs()
            }
            // Serve what is left without waiting, so purged messages are reported.
            while client.serveDeliveryReports(timeoutMilliseconds: 0, into: &buffer, deliver: { route(&$0) }) {}
            client.drainLogs()
            let continuation = state.withLock { s in
                s.pollThreadRunning = false
                defer { s.stopContinuation = nil }
                return s.stopContinuation
            }
            continuation?.resume()
        }
        thread.start()
    }

    /// Sets the calling thread's name (at most 15 bytes on Linux).
    private static func nameThisThread(_ name: String) {
        #if os(Linux)
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        guard fd >= 0 else { return }
        _ = name.withCString { write(fd, $0, strlen($0)) }
        close(fd)
        #endif
    }

    /// Marks the producer closed, ends the poll thread and fails batches that never got reports.
    func stop() async {
        let waiters = state.withLock { s in
            s.closed = true
            defer { s.spaceWaiters.removeAll() }
            return s.spaceWaiters
        }
        for waiter in waiters { waiter.resume() }
        if case .scheduled = serving.mode {
            // Served here for the last time, without waiting, so purged messages are reported.
            stopWakeUps()
            serveQueued()
        } else {
            await stopPollThread()
        }
        // Batches nobody awaits yet keep their reports (delivered ones stay delivered) for a
        // later `reports()`; only records that never got a report are failed as closed.
        failOrphanedBatches()
        reports.finish()
    }

    /// Ends the poll thread, which serves what is left first.
    private func stopPollThread() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let running = state.withLock { s in
                if s.pollThreadRunning { s.stopContinuation = continuation }
                return s.pollThreadRunning
            }
            stopRequested.store(true, ordering: .releasing)
            if running { client.wakeDeliveryReportPoll() } else { continuation.resume() }
        }
    }

    private func failOrphanedBatches() {
        let orphaned = state.withLock { s in
            var waiting: [(CheckedContinuation<[DeliveryReport], Never>, [DeliveryReport])] = []
            for (id, var batch) in s.batches {
                if batch.remaining > 0 {
                    for i in batch.reports.indices where batch.reports[i].offset < 0 && batch.reports[i].error == nil {
                        batch.reports[i].error = KafkaError.closed
                    }
                    batch.remaining = 0
                }
                if let c = batch.continuation {
                    waiting.append((c, batch.reports))
                    s.batches[id] = nil
                } else {
                    s.batches[id] = batch
                }
            }
            return waiting
        }
        for (continuation, reports) in orphaned { continuation.resume(returning: reports) }
    }

    /// The producer is gone without `close()`: its poll thread ends, or the wake-up callback is
    /// turned off.
    func stopServing() {
        stopRequested.store(true, ordering: .releasing)
        stopWakeUps()
    }
}

/// What librdkafka's wake-up callback gets (``DeliveryReportServing/scheduled(_:)``): schedules
/// one serving job of the producer.
final class ReportWaker: Sendable {
    let core: ProducerCore
    let schedule: @Sendable (@escaping @Sendable () -> Void) -> Void

    init(core: ProducerCore, schedule: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.core = core
        self.schedule = schedule
    }

    func wake() {
        schedule { [core] in core.serveQueued() }
    }
}

/// librdkafka's queue wake-up (its thread, the queue locked): only schedules the serving job.
private let wakeProducerCore: RDKafkaClient.QueueWakeUp = { _, context in
    guard let context else { return }
    Unmanaged<ReportWaker>.fromOpaque(context).takeUnretainedValue().wake()
}
