import Foundation

/// The consumer's poll thread: polls librdkafka at most one batch ahead of the application,
/// serves rebalance callbacks (librdkafka runs them on this thread, inside a poll), makes
/// position changes between two polls, and closes the consumer. Everything here belongs to
/// that one thread; what it shares with the application is in ``ConsumerCore``.
///
/// Position changes (``KafkaConsumer/seek(_:)``, ``KafkaConsumer/assign(_:)``) are commands the
/// poll thread carries out between two polls: it drops what it fetched for the old positions
/// and then calls librdkafka, whose op-version barrier drops what librdkafka itself fetched.
/// Everything fetched before the command is gone; everything after it is for the new position.
/// (A seek made on another thread could not tell apart the records a poll returned just before
/// it from those returned just after.)
final class ConsumerPollLoop {
    typealias Machine = ConsumerCore.Machine

    private let core: ConsumerCore
    private let maxBatchSize: Int
    private var consumer: RDKafkaConsumer { core.consumer }
    private lazy var closeCommit = ConsumerCloseCommit(consumer: core.consumer, stored: core.stored)

    private var outbox: [ConsumerEvent] = [] { didSet { core.bufferedEvents.store(outbox.count, ordering: .relaxed) } }
    private var pendingBatch: [ConsumerRecord] = []
    /// Partitions revoked by a rebalance callback that librdkafka served from inside
    /// `rd_kafka_consume_batch_queue`: records of theirs that the same call returned must not be
    /// handed out after the `.revoked` event. They are dropped (never stored, so the next owner
    /// reads them again).
    private var revokedWhileDraining: Set<TopicPartition> = []
    private var names = RDKafkaConsumer.ConversionCache()
    private var failed = false

    private init(core: ConsumerCore, maxBatchSize: Int) {
        self.core = core
        self.maxBatchSize = maxBatchSize
    }

    /// Starts the poll thread of this consumer. The loop belongs to that thread from here on.
    static func start(core: ConsumerCore, maxBatchSize: Int) {
        nonisolated(unsafe) let loop = ConsumerPollLoop(core: core, maxBatchSize: maxBatchSize)
        // Called only on the poll thread, inside a poll the loop makes: the loop is alive.
        core.consumer.rebalance.handler = { [unowned loop] kind, partitions, assignment in
            loop.rebalance(kind, partitions, assignment)
        }
        let thread = Thread { loop.run() }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    private var isClosing: Bool { core.state.withLock { $0.isClosing } }

    // MARK: the loop

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
        let orphaned = core.state.withLock { $0.pollerFinishing() }
        for done in orphaned { done.resume(returning: (KafkaError.closed, 0)) }
        let result = closeCommit.close(settleWithin: core.settleWithin.withLock { $0 })
        let waiters = core.state.withLock { $0.closed(result) }
        for waiter in waiters { waiter.resume(returning: result) }
    }

    /// Waits until the application wants an event (true) or the consumer is closing (false).
    /// `serving`: carries out position changes that come meanwhile (not inside a rebalance callback).
    private func waitForDemand(serving: Bool) -> Bool {
        while true {
            switch core.state.withLock({ $0.pollerStep(serving: serving) }) {
            case .close: return false
            case .deliver: return true
            case .serveCommands: serveCommands()
            case .wait: core.signals.wait()
            }
        }
    }

    /// Carries out the position changes that are waiting: drops what was fetched for the old
    /// positions, then calls librdkafka. Never inside a rebalance callback.
    private func serveCommands() {
        let waiting = core.state.withLock { $0.takeCommands() }
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
                done.resume(returning: (error, core.eventsDelivered))
            } else if let error {
                consumer.client.logger.warning("a seek after the rebalance failed: \(error)")
                core.state.withLock { $0.deferError(error) }
            }
        }
    }

    /// Drops fetched, undelivered records (and end-of-partition events) of the partitions a
    /// command moves; an assignment replaces everything.
    private func drop(for kind: Machine.Command.Kind) {
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
        guard !outbox.isEmpty, let waiter = core.state.withLock({ $0.takeDemandToDeliver() }) else { return }
        waiter.resume(returning: outbox.removeFirst())
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
            if failed { return }
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
    /// after the call, through a closure, so the two never overlap.
    private func drainFetched(limit: Int) -> Int {
        revokedWhileDraining.removeAll(keepingCapacity: true)
        var others: [RDKafkaPolled] = []
        var names = self.names
        let taken = consumer.drainFetched(
            limit: limit, names: &names,
            // The batch takes the record the conversion made, moved out of its slot (BENCHMARKS.md,
            // "Whole processes": a copy per record before).
            record: { slot in
                let record = slot.move()
                if revokedWhileDraining.isEmpty || !revokedWhileDraining.contains(record.topicPartition) {
                    pendingBatch.append(consume record)
                }
            },
            other: { others.append($0) })
        self.names = names
        for event in others { handle(event) }
        return taken
    }

    private func handle(_ polled: RDKafkaPolled) {
        switch polled {
        case .record(let record):
            pendingBatch.append(record)
        case .endOfPartition(let end):
            outbox.append(.endOfPartition(end))
        case .error(let error):
            if let fatal = consumer.client.fatalError() ?? (error.isFatal ? error : nil) {
                failed = true
                core.state.withLock { $0.fail(fatal) }?.resume(throwing: fatal)
            } else {
                consumer.client.logger.warning("consumer error: \(error)")
            }
        }
    }

    // MARK: rebalance callbacks

    private func rebalance(_ kind: RDKafkaRebalance, _ partitions: [TopicPartition], _ assignment: RDKafkaPendingAssignment?) {
        core.rebalanceCallbacks.add(1)
        // Everything polled before the rebalance goes out first, then the rebalance event;
        // the assignment changes only once the application asks for the next event.
        if !pendingBatch.isEmpty {
            outbox.append(.records(pendingBatch))
            pendingBatch = []
        }
        if kind != .assigned { revokedWhileDraining.formUnion(partitions) }
        switch kind {
        case .lost:
            core.stored.forget(partitions)
            core.lostPartitions.withLock { $0.formUnion(partitions) }
        case .assigned:
            core.lostPartitions.withLock { $0.subtract(partitions) }
        case .revoked:
            break
        }
        if isClosing {
            // Closing (rd_kafka_consumer_close revokes everything): nobody acknowledges any
            // more. Commit what the application stored while the partitions are still ours
            // and the generation is valid; a commit after the revocation would fail with
            // ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS and the stored offsets be lost.
            if kind == .revoked { closeCommit.commitInRevocation() }
            assignment?.make(.init())
            return
        }
        core.state.withLock { $0.rebalanceBegan(assigning: kind == .assigned ? partitions : nil) }
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
                for kind in core.state.withLock({ $0.pendingCommands }) { drop(for: kind) }
                deliverNext()
            }
        }
        // The application has the event; wait until it asks for the next one (its
        // acknowledgement), or closes instead: then what it stored meanwhile is committed
        // here, while the partitions are still ours.
        let acknowledged = open && waitForDemand(serving: false)
        let answer = core.state.withLock { $0.rebalanceAnswered() }
        assignment?.make(answer)
        // Offsets stored while the assignment was being made are stored now that it is.
        let stores = core.state.withLock { $0.assignmentMade() }
        if !stores.isEmpty { try? consumer.client.using { () throws(KafkaError) in try consumer.store(stores) } }
        switch kind {
        case .revoked: if acknowledged { closeCommit.commitRevoked(partitions) } else { closeCommit.commitInRevocation() }
        case .lost, .assigned: break
        }
    }
}
