import Dispatch
import Synchronization

/// What the application and the poll thread share: the ``ConsumerStateMachine`` behind a lock,
/// and a wake-up for the poll thread. The application's side is here; the poll thread's is
/// ``ConsumerPollLoop``.
///
/// Every method runs the machine under the lock and acts after releasing it: resumes waiters,
/// signals the poll thread, wakes it from a librdkafka poll.
final class ConsumerCore: Sendable {
    typealias Machine = ConsumerStateMachine<
        CheckedContinuation<ConsumerEvent?, any Error>,
        CheckedContinuation<(KafkaError?, Int), Never>,
        CheckedContinuation<KafkaError?, Never>
    >

    let consumer: RDKafkaConsumer
    let state = Mutex(Machine())
    /// Signalled whenever the state changes in a way the poll thread waits for (demand, a
    /// position change, the close). The poll thread is its only waiter; it checks the state
    /// again after every signal, so a signal nobody waited for only costs a loop.
    let signals = DispatchSemaphore(value: 0)

    /// Rebalance callbacks begun so far (tests wait for one while the application is busy).
    let rebalanceCallbacks = Atomic<Int>(0)
    /// Events fetched ahead and not handed out yet (tests wait on it).
    let bufferedEvents = Atomic<Int>(0)
    /// Partitions lost and not assigned again (written by the poll thread, read by anyone).
    let lostPartitions = Mutex<Set<TopicPartition>>([])
    /// The latest offset the application stored per partition (``ConsumerCloseCommit`` commits them).
    let stored = StoredOffsets()
    /// How long the final commit may wait for a rebalance to settle (set by the close).
    let settleWithin = Mutex<Duration>(.seconds(8))

    init(consumer: RDKafkaConsumer) {
        self.consumer = consumer
    }

    func next() async throws(KafkaError) -> ConsumerEvent? {
        // A task cancelled while it handled the last event ends the sequence here: the
        // cancellation handler below only resumes a wait that is already registered.
        if Task.isCancelled { return nil }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ConsumerEvent?, any Error>) in
                    // Cancelled since the check above: the handler may have run already, with no
                    // wait to resume (checked under the lock the handler takes).
                    let action = state.withLock { $0.next(continuation, cancelled: Task.isCancelled) }
                    switch action {
                    case .fail(let error): continuation.resume(throwing: error)
                    case .end: continuation.resume(returning: nil)
                    case .refuse: continuation.resume(throwing: KafkaError(code: .other, message: "a KafkaConsumer supports one iteration at a time"))
                    case .wait: signals.signal()
                    }
                }
            } onCancel: {
                state.withLock { $0.cancelDemand() }?.resume(returning: nil)
            }
        } catch let error as KafkaError {
            throw error
        } catch {
            throw KafkaError(code: .other, message: "\(error)")
        }
    }

    var partitionsBeingAssigned: [TopicPartition] { state.withLock { $0.partitionsBeingAssigned } }
    func startAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset]? { state.withLock { $0.startAssigned(offsets) } }
    func storeAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset] { state.withLock { $0.storeAssigned(offsets) } }
    func pauseAssigned(_ partitions: [TopicPartition]) -> [TopicPartition] { state.withLock { $0.pauseAssigned(partitions) } }
    var eventsDelivered: Int { state.withLock { $0.deliveredEvents } }

    func remember(_ offsets: [TopicPartitionOffset]) { stored.remember(offsets) }

    /// Hands a position change to the poll thread and waits until it is made (or, during a
    /// rebalance the application is handling, returns at once: it is made when the callback
    /// returns, before any further event). Returns how many events had been handed out then.
    @discardableResult
    func perform(_ kind: Machine.Command.Kind) async throws(KafkaError) -> Int {
        let (error, delivered): (KafkaError?, Int) = await withCheckedContinuation { (continuation: CheckedContinuation<(KafkaError?, Int), Never>) in
            // The wake-up is made under the lock, as in `close`: never once the poll thread is
            // finishing (the machine refuses a change then).
            let action: Machine.PerformAction = state.withLock { machine in
                let action = machine.perform(kind, done: continuation)
                if case .queued = action { consumer.wakePoll() }
                return action
            }
            switch action {
            case .refuse(let error): continuation.resume(returning: (error, 0))
            case .deferred(let delivered): continuation.resume(returning: (nil, delivered))
            case .queued: signals.signal()
            }
        }
        if let error { throw error }
        return delivered
    }

    /// Ends the sequence and makes the poll thread close the consumer. Returns the close's error.
    func close(settleWithin settle: Duration) async -> KafkaError? {
        settleWithin.withLock { $0 = settle }
        return await withCheckedContinuation { continuation in
            let action: Machine.CloseAction = state.withLock { machine in
                let action = machine.close(continuation)
                // Under the lock, so never once the poll thread is finishing: a wake-up that
                // reached `rd_kafka_consumer_close` would end its wait for the group's answer and
                // leave the close half done (`_TIMED_OUT`, then a destroy that overruns the deadline).
                if case .wait(_, wake: true) = action { consumer.wakePoll() }
                return action
            }
            switch action {
            case .closed(let result):
                continuation.resume(returning: result)
            case .wait(let endDemand, _):
                signals.signal()
                endDemand?.resume(returning: nil)
            }
        }
    }

    /// Closes without waiting (the consumer was released).
    func requestClose() {
        let pending = state.withLock { $0.requestClose() }
        signals.signal()
        pending?.resume(returning: nil)
    }
}

/// The latest offset the application stored per partition, so that a close that finds the
/// group rebalancing can still commit them once the rebalance is over (librdkafka drops stored
/// offsets of revoked partitions).
final class StoredOffsets: Sendable {
    private let offsets = Mutex<[TopicPartition: Int64]>([:])

    func remember(_ stored: [TopicPartitionOffset]) {
        offsets.withLock { s in for o in stored { s[o.topicPartition] = Swift.max(s[o.topicPartition] ?? -1, o.offset) } }
    }

    /// Lost partitions: what was stored for them can never be committed by this member.
    func forget(_ partitions: [TopicPartition]) {
        offsets.withLock { s in for tp in partitions { s[tp] = nil } }
    }

    /// Removes and returns what was stored for these partitions.
    func take(_ partitions: [TopicPartition]) -> [TopicPartitionOffset] {
        offsets.withLock { s in
            partitions.compactMap { tp in s.removeValue(forKey: tp).map { TopicPartitionOffset(tp.topic, tp.partition, offset: $0) } }
        }
    }

    /// What was stored for partitions in `held`.
    func of(_ held: Set<TopicPartition>) -> [TopicPartitionOffset] {
        offsets.withLock { s in
            s.filter { held.contains($0.key) }.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
        }
    }

    var isEmpty: Bool { offsets.withLock { $0.isEmpty } }
}
