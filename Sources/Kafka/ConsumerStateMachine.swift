/// The consumer's lifecycle and the hand-over between the application and the poll thread, as
/// values. Each method changes the state and says what the caller must do: resume a waiter,
/// wake the poll thread, call librdkafka. The caller holds the lock around the method and acts
/// after releasing it; nothing here calls C, so tests drive the machine alone.
///
/// Generic over the waiters so that tests can use plain values: `Demand` is an application
/// waiting in `next()`, `Done` one waiting for a position change, `CloseWaiter` one waiting
/// for the close.
struct ConsumerStateMachine<Demand: Sendable, Done: Sendable, CloseWaiter: Sendable>: Sendable {
    /// Where the consumer is in its life.
    enum Lifecycle: Sendable {
        /// Polling and handing events to the application.
        case running
        /// A fatal error: every `next()` throws it; closing still closes.
        case failed(KafkaError)
        /// The application asked to close. The poll thread stops polling, commits and leaves the
        /// group. `finishing` once it stopped polling: from then on nobody may wake it (a wake-up
        /// would end `rd_kafka_consumer_close`'s wait for the group's answer).
        case closing(failure: KafkaError?, finishing: Bool, waiters: [CloseWaiter])
        /// Closed and destroyed, with the close's outcome.
        case closed(result: KafkaError?, failure: KafkaError?)
    }

    /// Where the poll thread is with a rebalance.
    enum Rebalance: Sendable {
        /// No rebalance callback in progress.
        case idle
        /// Inside librdkafka's rebalance callback, waiting for the application to take the
        /// event and ask for the next one. Position changes wait for the callback's end; an
        /// assignment collects where the application wants its partitions to start.
        case inCallback(Assignment?)
        /// The application answered; the poll thread is making the assignment with that answer.
        /// Offsets stored meanwhile are stored once it is made.
        case makingAssignment(Assignment)
    }

    /// An assignment the application is handling: where it wants each partition to start,
    /// which it paused, and offsets it stored for them.
    struct Assignment: Sendable {
        var partitions: [TopicPartition]
        var answer = RDKafkaAssignmentAnswer()
        var stores: [TopicPartitionOffset] = []
    }

    /// A position change for the poll thread, and who waits for it (nil: nobody, it was
    /// deferred past a rebalance).
    struct Command: Sendable {
        enum Kind: Sendable {
            case seek([TopicPartitionOffset])
            case assign([TopicPartitionOffset])
        }
        var kind: Kind
        var done: Done?
    }

    private(set) var lifecycle: Lifecycle = .running
    private(set) var rebalance: Rebalance = .idle
    /// The application waiting in `next()`.
    private var demand: Demand?
    /// Position changes waiting for the poll thread.
    private var commands: [Command] = []
    /// The error of a position change made after a rebalance, for the next `next()`.
    private var deferredError: KafkaError?
    /// Events handed to the application so far.
    private(set) var deliveredEvents = 0

    init() {}

    var isClosing: Bool {
        switch lifecycle {
        case .running, .failed: false
        case .closing, .closed: true
        }
    }

    private var failure: KafkaError? {
        switch lifecycle {
        case .running: nil
        case .failed(let error): error
        case .closing(let failure, _, _), .closed(_, let failure): failure
        }
    }

    private var finishing: Bool {
        switch lifecycle {
        case .closing(_, let finishing, _): finishing
        case .closed: true
        case .running, .failed: false
        }
    }

    // MARK: application side

    enum NextAction: Sendable {
        /// Throw this error.
        case fail(KafkaError)
        /// The sequence has ended: return nil.
        case end
        /// Another iteration is waiting already.
        case refuse
        /// The demand is registered: signal the poll thread.
        case wait
    }

    /// The application asks for the next event.
    mutating func next(_ waiter: Demand, cancelled: Bool) -> NextAction {
        if let failure { return .fail(failure) }
        if let error = deferredError {
            deferredError = nil
            return .fail(error)
        }
        if isClosing || cancelled { return .end }
        if demand != nil { return .refuse }
        demand = waiter
        return .wait
    }

    /// The waiting application's task was cancelled: the demand to end (resume with nil).
    mutating func cancelDemand() -> Demand? {
        defer { demand = nil }
        return demand
    }

    enum PerformAction: Sendable {
        /// Closing or closed: throw this.
        case refuse(KafkaError)
        /// Inside a rebalance callback: the change is made when the callback returns, before
        /// any further event; return at once with the events handed out so far.
        case deferred(delivered: Int)
        /// Queued with its waiter: signal and wake the poll thread.
        case queued
    }

    mutating func perform(_ kind: Command.Kind, done: Done) -> PerformAction {
        if isClosing { return .refuse(KafkaError.closed) }
        if case .inCallback = rebalance {
            commands.append(Command(kind: kind, done: nil))
            return .deferred(delivered: deliveredEvents)
        }
        commands.append(Command(kind: kind, done: done))
        return .queued
    }

    enum CloseAction: Sendable {
        /// Closed already: return this outcome.
        case closed(KafkaError?)
        /// The waiter is registered; end the waiting `next()` (if any) with nil, signal the poll
        /// thread, and wake it from librdkafka if `wake`.
        case wait(endDemand: Demand?, wake: Bool)
    }

    mutating func close(_ waiter: CloseWaiter) -> CloseAction {
        switch lifecycle {
        case .closed(let result, _):
            return .closed(result)
        case .closing(let failure, let finishing, var waiters):
            waiters.append(waiter)
            lifecycle = .closing(failure: failure, finishing: finishing, waiters: waiters)
            return .wait(endDemand: takeDemand(), wake: !finishing)
        case .running, .failed:
            lifecycle = .closing(failure: failure, finishing: false, waiters: [waiter])
            return .wait(endDemand: takeDemand(), wake: true)
        }
    }

    /// Closing without waiting (the consumer is released): the demand to end with nil.
    mutating func requestClose() -> Demand? {
        switch lifecycle {
        case .running, .failed: lifecycle = .closing(failure: failure, finishing: false, waiters: [])
        case .closing, .closed: break
        }
        return takeDemand()
    }

    private mutating func takeDemand() -> Demand? {
        defer { demand = nil }
        return demand
    }

    /// The partitions of an assignment the application is handling.
    var partitionsBeingAssigned: [TopicPartition] { assignment?.partitions ?? [] }

    private var assignment: Assignment? {
        switch rebalance {
        case .idle: nil
        case .inCallback(let a): a
        case .makingAssignment(let a): a
        }
    }

    private mutating func updateAssignment(_ body: (inout Assignment) -> Void) {
        switch rebalance {
        case .idle, .inCallback(nil): return
        case .inCallback(var a?):
            body(&a)
            rebalance = .inCallback(a)
        case .makingAssignment(var a):
            body(&a)
            rebalance = .makingAssignment(a)
        }
    }

    /// Seeks of partitions being assigned become their start offsets; returns the other seeks
    /// (nil when there are none).
    mutating func startAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset]? {
        guard let partitions = assignment?.partitions else { return offsets.isEmpty ? nil : offsets }
        var rest: [TopicPartitionOffset] = []
        var starts: [TopicPartitionOffset] = []
        for o in offsets {
            if partitions.contains(o.topicPartition) { starts.append(o) } else { rest.append(o) }
        }
        updateAssignment { a in for o in starts { a.answer.starts[o.topicPartition] = o.offset } }
        return rest.isEmpty ? nil : rest
    }

    /// Offsets stored for partitions of an assignment not made yet are stored once it is;
    /// returns the others, to store now.
    mutating func storeAssigned(_ offsets: [TopicPartitionOffset]) -> [TopicPartitionOffset] {
        guard let partitions = assignment?.partitions else { return offsets }
        let mine = offsets.filter { partitions.contains($0.topicPartition) }
        guard !mine.isEmpty else { return offsets }
        updateAssignment { $0.stores += mine }
        return offsets.filter { !partitions.contains($0.topicPartition) }
    }

    /// Pauses of partitions being assigned are made with the assignment; returns the others.
    mutating func pauseAssigned(_ partitions: [TopicPartition]) -> [TopicPartition] {
        guard let assigning = assignment?.partitions else { return partitions }
        let mine = partitions.filter(assigning.contains)
        updateAssignment { $0.answer.paused += mine }
        return partitions.filter { !assigning.contains($0) }
    }

    // MARK: poll thread

    enum PollerStep: Sendable {
        /// Closing: stop polling.
        case close
        /// Position changes wait: take them (``takeCommands()``) and make them.
        case serveCommands
        /// The application waits for an event.
        case deliver
        /// Nothing to do: wait for a signal.
        case wait
    }

    /// What the poll thread does next while it waits for demand. `serving`: it makes position
    /// changes meanwhile (never inside a rebalance callback).
    func pollerStep(serving: Bool) -> PollerStep {
        if isClosing { return .close }
        if serving, !commands.isEmpty { return .serveCommands }
        if demand != nil { return .deliver }
        return .wait
    }

    mutating func takeCommands() -> [Command] {
        defer { commands = [] }
        return commands
    }

    /// The position changes waiting, left in place (inside a rebalance callback: what was
    /// fetched for the old positions is dropped now, librdkafka is called after the callback).
    var pendingCommands: [Command.Kind] { commands.map(\.kind) }

    /// Hands the next event to the waiting application: its demand, counted as delivered.
    mutating func takeDemandToDeliver() -> Demand? {
        guard let waiter = demand else { return nil }
        demand = nil
        deliveredEvents += 1
        return waiter
    }

    /// A position change made after a rebalance failed: the next `next()` throws it.
    mutating func deferError(_ error: KafkaError) {
        deferredError = deferredError ?? error
    }

    /// A fatal error: the demand to fail with it.
    mutating func fail(_ error: KafkaError) -> Demand? {
        switch lifecycle {
        case .running, .failed: lifecycle = .failed(error)
        case .closing(_, let finishing, let waiters): lifecycle = .closing(failure: error, finishing: finishing, waiters: waiters)
        case .closed(let result, _): lifecycle = .closed(result: result, failure: error)
        }
        return takeDemand()
    }

    /// A rebalance callback hands an event to the application (not when closing: then the
    /// callback answers at once).
    mutating func rebalanceBegan(assigning partitions: [TopicPartition]?) {
        rebalance = .inCallback(partitions.map { Assignment(partitions: $0) })
    }

    /// The application took the event and asked for the next one (or closed): the answer to
    /// make the assignment with. Offsets stored from now on wait for ``assignmentMade()``.
    mutating func rebalanceAnswered() -> RDKafkaAssignmentAnswer {
        guard case .inCallback(let a) = rebalance else { return RDKafkaAssignmentAnswer() }
        if let a {
            rebalance = .makingAssignment(a)
            return a.answer
        }
        rebalance = .idle
        return RDKafkaAssignmentAnswer()
    }

    /// The assignment is made: offsets the application stored for it meanwhile, to store now.
    mutating func assignmentMade() -> [TopicPartitionOffset] {
        defer { rebalance = .idle }
        guard case .makingAssignment(let a) = rebalance else { return [] }
        return a.stores
    }

    /// The poll thread stopped polling to close: the waiters of position changes never made
    /// (to resume with ``KafkaError/closed``).
    mutating func pollerFinishing() -> [Done] {
        if case .closing(let failure, _, let waiters) = lifecycle {
            lifecycle = .closing(failure: failure, finishing: true, waiters: waiters)
        }
        return takeCommands().compactMap(\.done)
    }

    /// The consumer is closed: the close waiters to resume with the result.
    mutating func closed(_ result: KafkaError?) -> [CloseWaiter] {
        var waiters: [CloseWaiter] = []
        if case .closing(_, _, let w) = lifecycle { waiters = w }
        lifecycle = .closed(result: result, failure: failure)
        return waiters
    }
}
