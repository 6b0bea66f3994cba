import Deadlines
import Foundation
import Kafka
import Logging
import Metrics
import ServiceLifecycle
import Synchronization
import Workers

/// Runs one stage (or chain) of a topology on Kafka, as a member of the stage's consumer group:
/// consume → process (per partition, in order, with the partition's own state) → produce
/// outputs and dead letters → make them durable in partition order → commit.
///
/// The parts, each in its own file: ``StageLoop`` (the event loop: lanes, the stage, the
/// `advance` timer, rebalances), ``SettlementQueue`` (per partition, what it owes the broker,
/// settled strictly in order), ``DeliveryGuarantee`` (how a settled stretch becomes durable:
/// ``AtLeastOnce`` or ``ExactlyOnce``), ``Changelog`` (state checkpoints and restore),
/// ``Backpressure`` (the in-flight bound), ``StageRecorder`` (the metrics).
///
/// - At least once: an input's offset becomes durable only after every output and dead letter
///   of it and of all earlier inputs of its partition is acknowledged; a stateful stage's
///   checkpoint likewise, and its offsets only with a checkpoint, so a restart or a rebalance
///   resumes exactly where the state stands.
/// - Rebalances: on assignment the state of each new partition is restored before its first
///   record and the partition starts where the state does; on revocation its outputs are
///   settled, its state checkpointed and its offsets committed before the partition goes. A
///   failed commit (a lost assignment) is logged, never fatal.
/// - Time: `advance` runs on a timer with the wall clock, so windows close on an idle stream.
/// - Failures: failed deliveries are retried with backoff while the partition is paused; after
///   the attempts the inputs go to the dead-letter topic. Bad input goes there at once. What
///   can never be delivered and belongs to no input stops the worker with the reason.
/// - Backpressure: above the in-flight bounds no more input is taken until half is settled
///   (and if that takes long, every partition is paused in librdkafka: see ``Backpressure``).
/// - Shutdown (``requestStop()``, the service group's graceful shutdown, `stopAfterInputs`, an
///   error): stop fetching, settle everything in flight, checkpoint, commit, leave the group,
///   all within ``WorkerSettings/shutdownDeadline``.
public final class StageService: Service, Sendable {
    public let definition: Topology.Stage
    public let health: WorkerHealth
    let recorder: StageRecorder
    let work: StageWork
    /// The transform or chain this stage runs (`dead-letter.transform`).
    let transformName: String
    let settings: WorkerSettings
    let logger: Logger
    /// A graceful stop was requested: the forwarder stops taking consumer events.
    private let stopping = OneShotEvent()

    /// - Parameter concurrent: the I/O stage for a topology stage whose chain names one (such as
    ///   `thumbnails.render`); the host that links its module builds it from the stage's options.
    public init(
        definition: Topology.Stage, topology: Topology, settings: WorkerSettings, health: WorkerHealth = WorkerHealth(),
        logger: Logger = Logger(label: "stage"), concurrent: (any ConcurrentTransform)? = nil
    ) throws {
        self.definition = definition
        self.settings = settings
        self.health = health
        var logger = logger
        logger[metadataKey: "stage"] = "\(definition.name)"
        self.logger = logger
        if let concurrent {
            guard definition.chain == [concurrent.name] else {
                throw TopologyError(
                    source: topology.source, line: nil, path: "stages.\(definition.name).chain",
                    message: "expected [\(concurrent.name)] for this worker, found \(definition.chain)")
            }
            work = .concurrent(concurrent, gate: AsyncGate(limit: definition.concurrency))
            transformName = concurrent.name
        } else {
            if let name = definition.chain.first(where: TransformCatalog.concurrentNames.contains) {
                throw TopologyError(
                    source: topology.source, line: nil, path: "stages.\(definition.name).chain",
                    message: "\(name) does I/O and runs alone in its stage, built by `pipelinectl worker` (chain: [\(name)])")
            }
            let template = try TransformCatalog(options: definition.options).runner(for: definition.chain)
            transformName = template.name
            var changelog: Changelog?
            if template.hasState {
                guard let name = definition.changelog, let topic = topology.topic(named: name) else {
                    throw TopologyError(
                        source: topology.source, line: nil, path: "stages.\(definition.name).changelog",
                        message: "\(definition.chain.joined(separator: ",")) keeps state per partition: name a compacted changelog topic")
                }
                changelog = Changelog(topic: name, partitions: topic.partitions, stage: definition.name)
            }
            work = .ordered(template: template, changelog: changelog)
        }
        recorder = StageRecorder(stage: definition.name, factory: settings.metricsFactory ?? MetricsSystem.factory)
    }

    /// What the worker has done so far, read back from its metrics (its status report and
    /// summary; tests read the metrics themselves through ``WorkerSettings/metricsFactory``).
    public var progress: StageProgress { recorder.progress }

    /// The mean and largest end-to-end latency (ms) since the last call (the status report's
    /// interval); nil when no input was settled.
    public func takeLatency() -> (mean: Double, max: Double)? { recorder.takeLatency() }

    /// Where the stage's metrics go (``WorkerSettings/metricsFactory``, else the bootstrapped one).
    public var metricsFactory: any MetricsFactory { recorder.metrics.factory }

    /// Begins a graceful stop: no more records are fetched; ``run()`` settles what is in flight,
    /// checkpoints, commits, leaves the group and returns.
    public func requestStop() {
        stopping.fire()
    }

    public func run() async throws {
        var consumerConfig = ConsumerConfiguration(kafka: settings.kafka, groupID: definition.group)
        consumerConfig.sessionTimeout = settings.sessionTimeout
        consumerConfig.heartbeatInterval = settings.heartbeatInterval
        consumerConfig.maxPollInterval = settings.maxPollInterval
        consumerConfig.maxBatchSize = settings.maxBatchSize
        consumerConfig.groupInstanceID = settings.instanceID
        consumerConfig.statisticsInterval = settings.statisticsInterval
        consumerConfig.fetchMaxWait = settings.fetchMaxWait
        // A stage that joins its inputs keeps one state per partition number across them: the
        // range assignor gives a member the same partition numbers of every input topic.
        if definition.joinsInputs { consumerConfig.assignmentStrategy = .range }
        // Commits are made by the delivery guarantee (every tick, on revocation and on close),
        // so that a failing commit is seen: it turns the worker not-ready.
        consumerConfig.autoCommit = false
        // Inputs written by an exactly-once stage are read once committed, never from an
        // aborted transaction (librdkafka's default, made explicit).
        consumerConfig.isolationLevel = .readCommitted
        var producerConfig = ProducerConfiguration(kafka: settings.kafka)
        producerConfig.messageTimeout = settings.messageTimeout
        producerConfig.statisticsInterval = settings.statisticsInterval
        producerConfig.linger = settings.linger
        let exactlyOnce = definition.delivery == .exactlyOnce
        if exactlyOnce {
            producerConfig.transactionalID = settings.transactionalID ?? Self.defaultTransactionalID(group: definition.group, instance: settings.instanceID)
            producerConfig.transactionTimeout = settings.transactionTimeout
            if let timeout = settings.messageTimeout, timeout > settings.transactionTimeout {
                producerConfig.messageTimeout = settings.transactionTimeout
            }
        }

        let consumer = try KafkaConsumer(configuration: consumerConfig, logger: logger)
        let producer = try KafkaProducer(configuration: producerConfig, logger: logger)
        if exactlyOnce {
            do {
                try await producer.initTransactions(timeout: settings.shutdownDeadline)
            } catch {
                try? await consumer.close(deadline: .seconds(5))
                await producer.close(deadline: .seconds(5))
                throw error
            }
            logger.info("exactly-once: transactional producer ready", metadata: ["transactional-id": "\(producerConfig.transactionalID ?? "")"])
        }
        let reader: KafkaConsumer?
        if case .ordered(_, .some) = work {
            var readerConfig = ConsumerConfiguration(kafka: settings.kafka, groupID: "\(definition.group).restore")
            readerConfig.autoCommit = false
            readerConfig.reportEndOfPartition = true
            reader = try KafkaConsumer(configuration: readerConfig, logger: logger)
        } else {
            reader = nil
        }
        try consumer.subscribe(definition.inputs)

        let (inputs, feed) = AsyncStream<LoopInput>.makeStream()
        let logLimiter = LogRateLimiter()
        let membership = MembershipGate(sessionTimeout: settings.sessionTimeout ?? .seconds(45), heartbeat: settings.heartbeatInterval ?? .seconds(3))
        let context = LoopContext(
            definition: definition, settings: settings, work: work, transformName: transformName, recorder: recorder, membership: membership, health: health,
            logLimiter: logLimiter, logger: logger, requestStop: { [weak self] in self?.requestStop() })
        let settlementTasks = ChildTasks()
        let guarantee: any DeliveryGuarantee = exactlyOnce
            ? ExactlyOnce(
                consumer: consumer, producer: producer, changelog: context.changelog, definition: definition, settings: settings,
                recorder: recorder, membership: membership, health: health, logger: logger)
            : AtLeastOnce(
                consumer: consumer, checkpointInterval: definition.checkpointInterval, recorder: recorder, membership: membership, health: health,
                logLimiter: logLimiter, logger: logger, tasks: settlementTasks, stopping: stopping)
        let backpressure = Backpressure(maxRecords: definition.maxInFlightRecords, maxBytes: definition.maxInFlightBytes)
        var settlement = SettlementQueue.Context(
            stageName: definition.name, transformName: transformName, deadLetterTopic: definition.deadLetterTopic, retry: definition.retry, consumer: consumer, producer: producer,
            backpressure: backpressure, guarantee: guarantee, recorder: recorder, membership: membership, logLimiter: logLimiter, logger: logger,
            fail: { [logger] error in
                // Also while stopping, when the loop no longer reads its input.
                logger.error("a partition cannot settle: \(error)")
                feed.yield(.failed(error))
            },
            tasks: settlementTasks)
        settlement.acknowledgements = settings.acknowledgementLog
        // Used by this task alone: it runs the loop, then (after run returned) hands the loop's
        // shutdown to the deadline race; the two never overlap.
        nonisolated(unsafe) let loop = StageLoop(
            context: context, consumer: consumer, producer: producer, reader: reader, guarantee: guarantee, backpressure: backpressure,
            settlement: settlement)

        // The worker's tasks, all children of this one: the membership clock, the forwarder of
        // consumer events, the loop's timer, the lanes' settlement tasks and, while stopping,
        // the drain of what the forwarder still hands over. None outlives run().
        let loopEnded = OneShotEvent()
        let forwarded = OneShotEvent()
        var failure: (any Error)?
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await membership.run() }
            group.addTask { await settlementTasks.run() }
            group.addTask { [stopping, logger, settings] in
                await stopping.cancelling {
                    await Self.forward(consumer: consumer, to: feed, backpressure: backpressure, pauseAfter: settings.backpressurePauseAfter, logger: logger)
                }
                feed.finish()
                forwarded.fire()
            }
            let interval = definition.advanceInterval
            group.addTask {
                await loopEnded.cancelling {
                    while !Task.isCancelled {
                        do { try await Task.sleep(for: interval) } catch { return }
                        feed.yield(.tick)
                    }
                }
            }
            logger.info("worker started", metadata: ["group": "\(definition.group)", "inputs": "\(definition.inputs)"])

            do {
                try await withGracefulShutdownHandler {
                    try await loop.run(inputs)
                } onGracefulShutdown: {
                    self.requestStop()
                }
            } catch {
                failure = error
                logger.error("worker stopping after an error: \(error)")
            }
            requestStop()
            health.stopping()
            loopEnded.fire()
            // What the forwarder still hands over is acknowledged unread, so that it can end.
            group.addTask { for await input in inputs { if case .event(_, let ack) = input { ack.resume() } } }
            // From here on everything is bounded by the shutdown deadline, whatever stopped the
            // worker: past it, what is still in flight is given up (the next owner reads from the
            // last commit) and run() throws.
            let deadline = settings.shutdownDeadline
            let stopBy = ContinuousClock.now + deadline
            // The step under way, for an overrun to name (a step that never ends is never logged).
            let phase = ShutdownPhase("waiting for the consumer's last events")
            let stopped = await Deadline.race(deadline) { [logger, recorder] () -> (any Error)? in
                // A step of the shutdown that takes a while is logged when it ends, so that an
                // overrun says where the time went.
                var step = ContinuousClock.now
                func took(_ what: String, next: String) {
                    let now = ContinuousClock.now
                    if now - step >= .seconds(1) { logger.info("stopping: \(what) took \(now - step)") }
                    step = now
                    phase.set(next)
                }
                await forwarded.wait()
                took("the consumer's last events", next: "settling what was in flight")
                var lastError: (any Error)?
                do {
                    try await loop.shutdown()
                } catch {
                    lastError = error
                    logger.error("stopping: \(error)")
                }
                took("settling what was in flight", next: "closing the consumer")
                do {
                    // librdkafka's close can wait for ever on a coordinator that does not answer
                    // (confluentinc/librdkafka#3740; local chaos saw it after tansu restarts): it
                    // gets the rest of the deadline but the producer's share, so that a worker
                    // whose outputs are settled still closes its producer and stops in time.
                    let left = max(.zero, stopBy - .now)
                    try await consumer.close(deadline: left - min(.seconds(5), left / 4))
                } catch {
                    // The final commit failed or the close overran: the inputs since the last commit
                    // are read again by the next owner (at least once). Not a failed run.
                    recorder.commitFailed()
                    logger.warning("closing the consumer: \(error)")
                }
                took("closing the consumer", next: reader == nil ? "closing the producer" : "closing the changelog reader")
                if let reader {
                    // A consumer too (its group is `<group>.restore`): its close can wait on its
                    // coordinator in the same way, and is given the same share.
                    do {
                        let left = max(.zero, stopBy - .now)
                        try await reader.close(deadline: left - min(.seconds(5), left / 4))
                    } catch {
                        logger.warning("closing the changelog reader: \(error)")
                    }
                    took("closing the changelog reader", next: "closing the producer")
                }
                await producer.close(deadline: max(.zero, stopBy - .now))
                took("closing the producer", next: "done")
                return lastError
            }
            switch stopped {
            case .none:
                // Inputs a concurrent stage is still working on have no outputs awaiting delivery
                // yet: both counts are named.
                let now = recorder.progress
                let overran = WorkerError.shutdownOverran(
                    "the shutdown did not finish within \(deadline) (\(max(0, now.processed - now.inputsSettled)) inputs not yet settled, "
                        + "\(backpressure.inFlight.records) records awaiting delivery; stuck \(phase.name)); what is not committed is read again by the next owner")
                logger.error("\(overran)")
                failure = failure ?? overran
            case .some(.some(let error)):
                failure = failure ?? error
            case .some(.none):
                break
            }
            membership.stop()
            // Every lane is finished (or, past the deadline, given up: cancelled below).
            settlementTasks.finish()
            // Past the deadline the forwarder may still wait for the consumer: it ends with it.
            feed.finish()
            group.cancelAll()
        }
        let progress = self.progress
        logger.info(
            "worker stopped",
            metadata: [
                "processed": "\(progress.processed)", "produced": "\(progress.produced)",
                "dead-lettered": "\(progress.deadLettered)",
                "active-seconds": "\(progress.activeSeconds)", "loop-busy-seconds": "\(progress.loopBusySeconds)",
            ])
        if let failure { throw failure }
    }

    /// Hands each consumer event to the loop and waits until the loop is done with it, so a
    /// rebalance completes only after the loop handled it. Ends when the consumer's events end,
    /// fail (the loop gets the error) or the task is cancelled.
    private static func forward(
        consumer: KafkaConsumer, to feed: AsyncStream<LoopInput>.Continuation, backpressure: Backpressure, pauseAfter: Duration, logger: Logger
    ) async {
        var events = consumer.makeAsyncIterator()
        do {
            while let event = try await events.next() {
                await withCheckedContinuation { ack in
                    // Nobody reads a finished feed: nothing to wait for.
                    if case .terminated = feed.yield(.event(event, ack)) { ack.resume() }
                }
                // Above the in-flight bound: the next batch waits until deliveries catch up. If
                // they do not within `pauseAfter`, the partitions are paused and events flow on
                // (a member that stops polling is taken out of its group).
                if await !backpressure.waitWhileClosed(atMost: pauseAfter), !Task.isCancelled,
                    backpressure.pauseConsumer({ if let assigned = try? consumer.assignment() { try? consumer.pause(assigned) } })
                {
                    logger.warning(
                        "in-flight bound held for \(pauseAfter): partitions paused until deliveries catch up",
                        metadata: ["records": "\(backpressure.inFlight.records)"])
                }
            }
        } catch {
            feed.yield(.failed(error))
        }
    }

    /// `<group>-<instance id>`, or `<group>-<host>-<slot>`: unique among the running workers of
    /// a group, and the same across a restart, so that the new producer fences its predecessor
    /// and aborts the transaction it left open (with the pid in it, nobody did: a killed worker's
    /// open transaction then froze the changelog's last stable offset until its timeout). The
    /// slot is the lowest number whose lock file (`pipelinectl-txn-<group>-<slot>.lock` in the
    /// temporary directory) this process can lock: a worker restarted on its host finds its
    /// predecessor's slot free again, two running at once hold two slots. A StatefulSet pod is
    /// always slot 1 of its own host name.
    static func defaultTransactionalID(group: String, instance: String?) -> String {
        if let instance { return "\(group)-\(instance)" }
        return "\(group)-\(ProcessInfo.processInfo.hostName)-\(TransactionalSlot.take(group: group))"
    }
}

/// A per-host slot number for a default `transactional.id`: the lowest one whose lock file this
/// process can lock (`flock`, held until the process ends, released by the kernel when it dies).
enum TransactionalSlot {
    static func take(group: String) -> Int {
        let safe = String(group.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "_" })
        for slot in 1...4096 {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-txn-\(safe)-\(slot).lock").path
            let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
            guard fd >= 0 else { break }
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return slot }  // kept open: the lock lasts as long as the process
            close(fd)
        }
        // No lock files (a read-only temporary directory): unique per process instead.
        return 100_000 + Int(ProcessInfo.processInfo.processIdentifier)
    }
}

/// Why a worker stopped on its own.
public enum WorkerError: Error, CustomStringConvertible {
    /// Something that belongs to no input (a checkpoint, a dead letter, an `advance` output) can
    /// never be delivered, e.g. it is larger than `message.max.bytes`: retrying would block its
    /// partition for good, and skipping it would lose it.
    case undeliverable(String)
    /// The producer cannot deliver anything any more (a fatal error, or a broker that fenced it
    /// or lost its producer id: ``KafkaProducer/unusable``). The worker stops with the reason
    /// instead of dead-lettering everything it makes; a restarted worker has a new producer.
    case producerUnusable(String)
    /// The stop did not finish within ``WorkerSettings/shutdownDeadline``.
    case shutdownOverran(String)

    public var description: String {
        switch self {
        case .undeliverable(let what): "undeliverable: \(what)"
        case .producerUnusable(let why): "the producer cannot deliver any more: \(why)"
        case .shutdownOverran(let what): "shutdown overran: \(what)"
        }
    }
}

/// The step of a worker's shutdown under way (``StageService``), read when the shutdown overruns.
private final class ShutdownPhase: Sendable {
    private let current: Mutex<String>
    init(_ name: String) { current = Mutex(name) }
    var name: String { current.withLock { $0 } }
    func set(_ name: String) { current.withLock { $0 = name } }
}
