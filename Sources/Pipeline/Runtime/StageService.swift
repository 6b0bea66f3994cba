import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization
import Workers
import Kafka

/// How a worker process connects and stops.
public struct WorkerSettings: Sendable {
    public var kafka: KafkaConfiguration
    /// `session.timeout.ms` (keep it low against the local broker: tansu answers JoinGroup after
    /// about half of it).
    public var sessionTimeout: Duration?
    public var heartbeatInterval: Duration?
    public var maxPollInterval: Duration?
    /// `message.timeout.ms`: how long the producer retries one delivery before reporting it failed.
    public var messageTimeout: Duration?
    public var maxBatchSize = 1000
    /// Everything in flight must be delivered, checkpointed and committed within this.
    public var shutdownDeadline: Duration = .seconds(30)
    /// Begin a graceful stop once this many inputs were processed (demo, tests). Nil: run until stopped.
    public var stopAfterInputs: Int?
    /// Static group membership (`group.instance.id`).
    public var instanceID: String?
    /// Exactly-once: the producer's `transactional.id`. A restarted worker that keeps its id
    /// fences its predecessor and aborts the transaction it left open (otherwise that waits for
    /// `transactionTimeout`). Nil: the group, then the instance id, or the host name, process id
    /// and the service's number in the process.
    public var transactionalID: String?
    /// Exactly-once: how long the coordinator lets a transaction stay open (`transaction.timeout.ms`).
    public var transactionTimeout: Duration = .seconds(60)
    /// Fault injection (tests): asked before each transaction that carries input offsets
    /// commits; an error makes that commit fail as a broker refusal would (the transaction aborts).
    var transactionFault: (@Sendable () -> KafkaError?)?
    /// How often librdkafka statistics refresh the `kafka_*` metrics and the group state (nil: never).
    public var statisticsInterval: Duration? = .seconds(5)
    /// Longest time the broker may hold a fetch waiting for data (`fetch.wait.max.ms`; librdkafka's
    /// default is 500 ms). Lower means lower latency on a quiet stream and more fetch requests.
    public var fetchMaxWait: Duration? = .milliseconds(100)
    /// Above the in-flight bound the worker takes no more input; if it stays above it this long
    /// (deliveries are stuck), the partitions are also paused in librdkafka and polling goes on
    /// (librdkafka takes a member that stops polling out of its group; see ``Backpressure``).
    public var backpressurePauseAfter: Duration = .seconds(1)

    public init(kafka: KafkaConfiguration) { self.kafka = kafka }
    public init(bootstrapServers: [String]) { self.kafka = KafkaConfiguration(bootstrapServers: bootstrapServers) }
}

/// Runs one stage (or chain) of a topology on Kafka, as a member of the stage's consumer group:
/// consume → process (per partition, in order, with the partition's own state) → produce
/// outputs and dead letters → store the offset once all of it is delivered → commit.
///
/// - At least once: an input's offset is stored only after every output and dead letter of it
///   and of all earlier inputs of its partition is acknowledged (``Settler``); a stateful
///   stage's offsets only with a checkpoint of its state (``Changelog``), so a restart or a
///   rebalance resumes exactly where the state stands.
/// - Rebalances: on assignment the state of each new partition is restored before its first
///   record; on revocation its outputs are settled, its state checkpointed and its offsets
///   committed before the partition goes. A failed commit (a lost assignment) is logged, never fatal.
/// - Time: `advance` runs on a timer with the wall clock, so windows close on an idle stream.
/// - Failures: failed deliveries are retried with backoff while the partition is paused; after
///   the attempts the inputs go to the dead-letter topic. Bad input goes there at once.
/// - Backpressure: above the in-flight bounds no more input is taken until half is settled
///   (and if that takes long, every partition is paused in librdkafka: see ``Backpressure``).
/// - Shutdown (``requestStop()`` or the service group's graceful shutdown): stop fetching, settle
///   everything in flight, checkpoint, commit, leave the group.
public final class StageService: Service, Sendable {
    public let definition: Topology.Stage
    public let counters = StageCounters()
    public let health: WorkerHealth
    let metrics: StageMetrics
    let logLimiter = LogRateLimiter()
    /// How many records a concurrent stage works on at once.
    let gate: AsyncGate
    /// The ordered stage (a chain from the catalog), one copy per partition lane; nil when the
    /// stage is a ``ConcurrentStage``.
    let template: StageRunner?
    /// The stage that does I/O, run on many records at once (``ConcurrentStage``).
    let concurrent: (any ConcurrentStage)?
    /// Name in dead letters: the chain's or the concurrent stage's.
    let stageName: String
    let changelog: Changelog?
    let settings: WorkerSettings
    let logger: Logger
    private let stopSignal = Mutex<(requested: Bool, forwarder: Task<Void, Never>?)>((false, nil))

    /// - Parameter concurrent: the I/O stage for a topology stage whose chain names one (such as
    ///   `thumbnails.render`); the host that links its module builds it from the stage's options.
    public init(
        definition: Topology.Stage, topology: Topology, settings: WorkerSettings, health: WorkerHealth = WorkerHealth(),
        logger: Logger = Logger(label: "stage"), concurrent: (any ConcurrentStage)? = nil
    ) throws {
        self.definition = definition
        self.settings = settings
        self.health = health
        self.metrics = StageMetrics(stage: definition.name)
        self.gate = AsyncGate(limit: definition.concurrency)
        var logger = logger
        logger[metadataKey: "stage"] = "\(definition.name)"
        self.logger = logger
        if let concurrent {
            guard definition.chain == [concurrent.name] else {
                throw TopologyError(
                    source: topology.source, line: nil, path: "stages.\(definition.name).chain",
                    message: "expected [\(concurrent.name)] for this worker, found \(definition.chain)")
            }
            self.concurrent = concurrent
            template = nil
            stageName = concurrent.name
            changelog = nil
            return
        }
        if let name = definition.chain.first(where: StageCatalog.concurrentNames.contains) {
            throw TopologyError(
                source: topology.source, line: nil, path: "stages.\(definition.name).chain",
                message: "\(name) does I/O and runs alone in its stage, built by `pipelinectl worker` (chain: [\(name)])")
        }
        self.concurrent = nil
        let template = try StageCatalog(options: definition.options).runner(for: definition.chain)
        self.template = template
        stageName = template.name
        if template.hasState {
            guard let name = definition.changelog, let topic = topology.topic(named: name) else {
                throw TopologyError(
                    source: topology.source, line: nil, path: "stages.\(definition.name).changelog",
                    message: "\(definition.chain.joined(separator: ",")) keeps state per partition: name a compacted changelog topic")
            }
            changelog = Changelog(topic: name, partitions: topic.partitions)
        } else {
            changelog = nil
        }
    }

    /// Begins a graceful stop: no more records are fetched; ``run()`` settles what is in flight,
    /// checkpoints, commits, leaves the group and returns.
    public func requestStop() {
        let forwarder = stopSignal.withLock { s in
            s.requested = true
            return s.forwarder
        }
        forwarder?.cancel()
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
        // Commits are made by the loop (every tick, on revocation and on close), so that a
        // failing commit is seen: it turns the worker not-ready.
        consumerConfig.autoCommit = false
        // Inputs written by an exactly-once stage are read once committed, never from an
        // aborted transaction (librdkafka's default, made explicit).
        consumerConfig.isolationLevel = .readCommitted
        var producerConfig = ProducerConfiguration(kafka: settings.kafka)
        producerConfig.messageTimeout = settings.messageTimeout
        producerConfig.statisticsInterval = settings.statisticsInterval
        producerConfig.linger = .milliseconds(5)
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
        var reader: KafkaConsumer?
        if changelog != nil {
            var readerConfig = ConsumerConfiguration(kafka: settings.kafka, groupID: "\(definition.group).restore")
            readerConfig.autoCommit = false
            readerConfig.reportEndOfPartition = true
            reader = try KafkaConsumer(configuration: readerConfig, logger: logger)
        }
        try consumer.subscribe(definition.inputs)

        let backpressure = Backpressure(maxRecords: definition.maxInFlightRecords, maxBytes: definition.maxInFlightBytes)
        let settler = Settler(
            stageName: stageName, deadLetterTopic: definition.deadLetterTopic, retry: definition.retry,
            consumer: consumer, producer: producer, backpressure: backpressure, counters: counters, metrics: metrics,
            logLimiter: logLimiter, logger: logger, transaction: exactlyOnce ? TransactionFailures() : nil)
        let loop = StageLoop(service: self, consumer: consumer, producer: producer, reader: reader, settler: settler, backpressure: backpressure)

        let (inputs, feed) = AsyncStream<LoopInput>.makeStream()
        let forwarder = Task {
            // Hands each consumer event to the loop and waits until the loop is done with it, so
            // a rebalance completes only after the loop handled it.
            var events = consumer.makeAsyncIterator()
            let pauseAfter = settings.backpressurePauseAfter
            do {
                while let event = try await events.next() {
                    await withCheckedContinuation { ack in feed.yield(.event(event, ack)) }
                    // Above the in-flight bound: the next batch waits until deliveries catch
                    // up. If they do not within `pauseAfter`, the partitions are paused and
                    // events flow on (a member that stops polling is taken out of its group).
                    if await !backpressure.waitWhileClosed(atMost: pauseAfter), !Task.isCancelled,
                        backpressure.pauseConsumer({ if let assigned = try? consumer.assignment() { try? consumer.pause(assigned) } })
                    {
                        self.logger.warning(
                            "in-flight bound held for \(pauseAfter): partitions paused until deliveries catch up",
                            metadata: ["records": "\(backpressure.inFlight.records)"])
                    }
                }
            } catch {
                feed.yield(.failed(error))
            }
            feed.finish()
        }
        let stopNow = stopSignal.withLock { s in
            s.forwarder = forwarder
            return s.requested
        }
        if stopNow { forwarder.cancel() }
        let interval = definition.advanceInterval
        let timer = Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: interval) } catch { return }
                feed.yield(.tick)
            }
        }
        logger.info("worker started", metadata: ["group": "\(definition.group)", "inputs": "\(definition.inputs)"])

        var failure: (any Error)?
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
        timer.cancel()
        // Drain what the forwarder still holds so it can end.
        let drain = Task { for await input in inputs { if case .event(_, let ack) = input { ack.resume() } } }
        await forwarder.value
        await loop.shutdown()
        drain.cancel()
        do {
            try await consumer.close(deadline: settings.shutdownDeadline)
        } catch {
            // The final commit failed or the close overran: the inputs since the last commit
            // are read again by the next owner (at least once). Not a failed run.
            counters.commitFailures.add(1)
            metrics.commitFailures.increment()
            logger.warning("closing the consumer: \(error)")
        }
        if let reader { try? await reader.close(deadline: .seconds(5)) }
        await producer.close(deadline: settings.shutdownDeadline)
        logger.info(
            "worker stopped",
            metadata: [
                "processed": "\(counters.processed.value)", "produced": "\(counters.produced.value)",
                "dead-lettered": "\(counters.deadLettered.value)",
                "active-seconds": "\(counters.activeSeconds)", "loop-busy-seconds": "\(counters.loopBusySeconds)",
            ])
        if let failure { throw failure }
    }

    /// A stage's outputs and dead letters for one input (or an `advance`), as records to produce
    /// with the input's timestamp. Each output is tagged `source` in `sources` (its input's index in
    /// a ``Pending``), each dead letter ``Pending/noInput``; dead letters are logged, rate-limited.
    func append(_ out: StageOutput, of input: InputRecord, source: Int32, to outgoing: inout [ProducerRecord], sources: inout [Int32]) {
        var route: (output: String, topic: String)?
        for o in out.records {
            // Looked up once per output name in a row, not hashed per record.
            if route?.output != o.output { route = (o.output, definition.topic(forOutput: o.output)) }
            outgoing.append(RecordMapping.output(o, topic: route!.topic, timestamp: input.timestamp))
            sources.append(source)
        }
        for f in out.failures {
            outgoing.append(RecordMapping.deadLetter(DeadLetter(stage: stageName, input: input, failure: f), topic: definition.deadLetterTopic))
            sources.append(Pending.noInput)
            if let suppressed = logLimiter.admit("dead-letter") {
                logger.warning(
                    "dead letter",
                    metadata: [
                        "origin": "\(input.origin.topic)[\(input.origin.partition)]@\(input.origin.offset)",
                        "reason": "\(f.reason.rawValue)", "field": "\(f.field)", "detail": "\(f.detail)",
                        "suppressed-before": "\(suppressed)",
                    ])
            }
        }
    }

    /// `<group>-<instance id>`, or `<group>-<host>-<pid>-<n>` (the n-th exactly-once service of
    /// the process): unique among the running workers of a group, and stable across restarts
    /// where the instance id, or the host name and pid, are (a StatefulSet pod runs as pid 1).
    static func defaultTransactionalID(group: String, instance: String?) -> String {
        if let instance { return "\(group)-\(instance)" }
        let n = transactionalServices.add(1, ordering: .relaxed).newValue
        return "\(group)-\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(n)"
    }

    private static let transactionalServices = Atomic<Int>(0)
}

/// What the loop reacts to: a consumer event (acknowledged when handled), a timer tick, or the
/// consumer's terminal error.
enum LoopInput: Sendable {
    case event(ConsumerEvent, CheckedContinuation<Void, Never>)
    case tick
    case failed(any Error)
}

/// The service's event loop: owns the partition lanes and their stage states. Confined to the
/// task that runs ``StageService/run()``.
final class StageLoop {
    let service: StageService
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let reader: KafkaConsumer?
    let settler: Settler
    let backpressure: Backpressure
    private var lanes: [TopicPartition: PartitionLane] = [:]
    /// Exactly-once: the open transaction; nil for at-least-once.
    private var transaction: OpenTransaction?
    private var definition: Topology.Stage { service.definition }
    private var logger: Logger { service.logger }
    private var counters: StageCounters { service.counters }

    init(service: StageService, consumer: KafkaConsumer, producer: KafkaProducer, reader: KafkaConsumer?, settler: Settler, backpressure: Backpressure) {
        self.service = service
        self.consumer = consumer
        self.producer = producer
        self.reader = reader
        self.settler = settler
        self.backpressure = backpressure
        transaction = service.definition.delivery == .exactlyOnce ? OpenTransaction() : nil
    }

    static func wallClock() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func run(_ inputs: AsyncStream<LoopInput>) async throws {
        for await input in inputs {
            service.health.loopTurned()
            let started = ContinuousClock.now
            defer {
                let busy = ContinuousClock.now - started
                counters.loopBusy.withLock { $0 += busy }
                service.metrics.loopBusy.increment(by: busy.asSeconds)
            }
            switch input {
            case .event(let event, let ack):
                do {
                    try await handle(event)
                } catch {
                    ack.resume()
                    throw error
                }
                ack.resume()
                if let limit = service.settings.stopAfterInputs, counters.processed.value >= limit { service.requestStop() }
            case .tick:
                try await advance(now: Self.wallClock())
                if transaction != nil { try await commitTransaction("tick") } else { await commit("tick") }
                observe()
            case .failed(let error):
                throw error
            }
        }
    }

    private func handle(_ event: ConsumerEvent) async throws {
        switch event {
        case .records(let batch):
            try await process(batch)
            if let opened = transaction?.openedAt, ContinuousClock.now - opened >= definition.commitInterval {
                try await commitTransaction("interval")
            }
        case .assigned(let partitions):
            counters.rebalances.add(1)
            service.metrics.rebalances.increment()
            logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            try await assign(partitions)
            if backpressure.gate == .paused { try? consumer.pause(partitions) }
            service.health.assigned(total: assignedCount)
            service.metrics.assignedPartitions.record(assignedCount)
        case .revoked(let partitions):
            counters.rebalances.add(1)
            service.metrics.rebalances.increment()
            logger.info("partitions revoked", metadata: ["partitions": "\(partitions)"])
            service.health.revoked(total: max(0, assignedCount - partitions.count))
            // Exactly-once: what was done for the partitions commits before they go (on a lost
            // assignment the coordinator refuses the offsets, and the transaction aborts).
            if transaction != nil { try await commitTransaction("revocation") }
            for tp in partitions {
                // A joined lane goes with the first of its partitions (they are assigned and
                // revoked together; one left behind gets a lane again, restored, at its next record).
                guard let lane = lanes.removeValue(forKey: laneID(tp)) else { continue }
                if transaction == nil { await checkpoint(lane) }
                await lane.finish()
                for gauges in lane.lagGauges.values {
                    gauges.records.record(0)
                    gauges.seconds.record(0)
                }
            }
            if transaction == nil { await commit("revocation") }
            service.metrics.assignedPartitions.record(assignedCount)
        case .endOfPartition:
            break
        }
    }

    /// The lane an input partition belongs to: its own, or for a stage that joins its inputs,
    /// the one of that partition number across every input topic.
    private func laneID(_ tp: TopicPartition) -> TopicPartition {
        definition.joinsInputs ? TopicPartition(definition.inputs.joined(separator: "+"), tp.partition) : tp
    }

    /// Input partitions held in lanes.
    private var assignedCount: Int { definition.joinsInputs ? lanes.count * definition.inputs.count : lanes.count }

    /// The input partitions of a lane.
    private func members(of id: TopicPartition) -> [TopicPartition] {
        definition.joinsInputs ? definition.inputs.map { TopicPartition($0, id.partition) } : [id]
    }

    private func makeLane(_ id: TopicPartition) -> PartitionLane {
        let settler = self.settler
        let members = members(of: id)
        let lane = PartitionLane(id: id, runner: service.template) { await settler.settle($0, partitions: members) }
        for tp in members { lane.lagGauges[tp] = service.metrics.lag(tp) }
        return lane
    }

    /// New partitions get a lane; a stateful stage's state is restored before their first record.
    private func assign(_ partitions: [TopicPartition]) async throws {
        var ids: [TopicPartition] = []
        for tp in partitions where lanes[laneID(tp)] == nil && !ids.contains(laneID(tp)) { ids.append(laneID(tp)) }
        var restored: [TopicPartition: Changelog.Checkpoint] = [:]
        if let changelog = service.changelog, let reader, !ids.isEmpty {
            restored = try await changelog.restore(ids, stateType: service.template!.stateType, using: reader)
        }
        for id in ids {
            let lane = makeLane(id)
            if let checkpoint = restored[id] {
                try lane.runner?.restore(checkpoint.state)
                lane.skipBelow = checkpoint.offsets
                lane.next = checkpoint.offsets
                lane.restoredOffsets = checkpoint.offsets.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
                counters.restoredPartitions.add(1)
                logger.info("state restored", metadata: ["partition": "\(id)", "offsets": "\(checkpoint.offsets.values.sorted())"])
            }
            lanes[id] = lane
        }
    }



    private func process(_ batch: [ConsumerRecord]) async throws {
        // A batch holds records of one or more partitions, each in offset order.
        var start = 0
        while start < batch.count {
            let tp = batch[start].topicPartition
            var end = start + 1
            while end < batch.count, batch[end].partition == batch[start].partition, batch[end].topic == batch[start].topic { end += 1 }
            let lane: PartitionLane
            if let existing = lanes[laneID(tp)] {
                lane = existing
            } else {
                try await assign([tp])
                lane = lanes[laneID(tp)]!
            }
            try await process(batch[start..<end], lane: lane)
            start = end
        }
    }

    private func process(_ records: ArraySlice<ConsumerRecord>, lane: PartitionLane) async throws {
        let records = transaction == nil ? records : lane.droppingStale(records)
        guard let tp = records.first?.topicPartition else { return }
        if let stage = service.concurrent {
            try enterTransaction(lane, first: [tp: records[records.startIndex].offset])
            start(records, lane: lane, stage: stage)
            return
        }
        try await storeRestoredOffsets(lane)
        let now = Self.wallClock()
        let skipBelow = lane.skipBelow[tp] ?? -1
        if let first = records.first(where: { $0.offset >= skipBelow }) { try enterTransaction(lane, first: [tp: first.offset]) }
        var last: Int64?
        let started = ContinuousClock.now
        var outgoing: [ProducerRecord] = []
        var sources: [Int32] = []
        var inputs: [InputRecord] = []
        outgoing.reserveCapacity(records.count)
        sources.reserveCapacity(records.count)
        inputs.reserveCapacity(records.count)
        for record in records where record.offset >= skipBelow {
            let input = RecordMapping.input(record, now: now)
            let out = lane.runner!.process(input, context: StageContext(now: input.timestamp))
            let index = Int32(inputs.count)
            inputs.append(input)
            service.append(out, of: input, source: index, to: &outgoing, sources: &sources)
            last = record.offset
            lane.lastTimestamp = input.timestamp
        }
        guard let last else { return }
        lane.next[tp] = last + 1
        if counters.processed.value == 0 { counters.firstProcessed.withLock { $0 = $0 ?? started } }
        counters.processed.add(inputs.count)
        service.metrics.recordsIn.increment(by: Int64(inputs.count))
        service.metrics.batchProcessing.record(duration: ContinuousClock.now - started)
        service.health.progressed()
        let stateful = service.changelog != nil
        if stateful { lane.dirty = true }
        try await submit(
            outgoing, sources: sources, inputs: inputs, to: lane,
            storeOffsets: stateful ? [] : [TopicPartitionOffset(tp.topic, tp.partition, offset: last + 1)])
        if stateful, transaction == nil, ContinuousClock.now - lane.lastCheckpoint >= definition.checkpointInterval { await checkpoint(lane) }
    }

    /// A concurrent stage: each record becomes a task (bounded by the stage's concurrency) that
    /// runs the stage and submits the outputs once every earlier record of the same key has
    /// submitted its own. The lane settles the tasks in offset order, so an offset is stored only
    /// when it and every earlier input of the partition are done.
    private func start(_ records: ArraySlice<ConsumerRecord>, lane: PartitionLane, stage: any ConcurrentStage) {
        let now = Self.wallClock()
        let producer = self.producer, service = self.service, metrics = service.metrics, gate = service.gate
        var started = 0
        var heldBytes = 0
        for record in records {
            let input = RecordMapping.input(record, now: now)
            let bytes = (record.value?.count ?? 0) + (record.key?.count ?? 0)
            let earlier = lane.lastTask(forKey: record.key)
            let task = Task<Pending?, Never> {
                await gate.acquire()
                let began = ContinuousClock.now
                let out = await stage.process(input)
                gate.release()
                metrics.batchProcessing.record(duration: ContinuousClock.now - began)
                var outgoing: [ProducerRecord] = []
                var sources: [Int32] = []
                service.append(out, of: input, source: 0, to: &outgoing, sources: &sources)
                // Same key, input order: submit after the earlier record of the key submitted.
                _ = await earlier?.value
                guard let ticket = try? await producer.submit(outgoing) else { return nil }
                return Pending(
                    records: outgoing, sources: sources, inputs: [input], ticket: ticket,
                    storeOffsets: [TopicPartitionOffset(record.topic, record.partition, offset: record.offset + 1)],
                    inputCount: 1, bytes: bytes, heldRecords: 1)
            }
            lane.enqueue(task, key: record.key)
            lane.next[record.topicPartition] = record.offset + 1
            lane.lastTimestamp = input.timestamp
            started += 1
            heldBytes += bytes
        }
        guard started > 0 else { return }
        if counters.processed.value == 0 { counters.firstProcessed.withLock { $0 = $0 ?? .now } }
        counters.processed.add(started)
        service.metrics.recordsIn.increment(by: Int64(started))
        service.health.progressed()
        if backpressure.add(records: started, bytes: heldBytes) { boundReached() }
    }

    private func submit(
        _ records: [ProducerRecord], sources: [Int32], inputs: [InputRecord], to lane: PartitionLane, storeOffsets: [TopicPartitionOffset]
    ) async throws {
        let bytes = records.reduce(0) { $0 + RecordMapping.size($1) }
        let ticket = try await producer.submit(records)
        // Exactly-once: offsets go with the transaction, never through the consumer.
        lane.enqueue(Pending(
            records: records, sources: sources, inputs: inputs, ticket: ticket, storeOffsets: transaction == nil ? storeOffsets : [],
            inputCount: inputs.count, bytes: bytes))
        if backpressure.add(records: records.count, bytes: bytes) { boundReached() }
    }

    /// The in-flight bound was just crossed: the forwarder waits for deliveries before it takes
    /// the next batch. Counted, and logged at most 10 times per 10 s.
    private func boundReached() {
        counters.backpressureWaits.add(1)
        service.metrics.backpressureWaits.increment()
        if let suppressed = service.logLimiter.admit("in-flight-bound") {
            logger.info(
                "in-flight bound reached: waiting for deliveries before taking more input",
                metadata: ["records": "\(backpressure.inFlight.records)", "suppressed-before": "\(suppressed)"])
        }
    }

    /// A restored state is durable up to its checkpoint's offset, which may be past the group's
    /// committed offset (the previous owner stopped between checkpoint and commit). That offset
    /// is stored once the partition is really ours (the first batch or tick after the
    /// assignment; during the assignment event librdkafka refuses it), through the lane, so that
    /// it is stored before any later one. Otherwise a worker that only re-reads skipped inputs
    /// never commits past them.
    /// (Exactly-once commits them with the next transaction: see ``commitTransaction(_:)``.)
    private func storeRestoredOffsets(_ lane: PartitionLane) async throws {
        guard transaction == nil, !lane.restoredOffsets.isEmpty else { return }
        let offsets = lane.restoredOffsets
        lane.restoredOffsets = []
        try await submit([], sources: [], inputs: [], to: lane, storeOffsets: offsets)
    }

    /// Writes the lane's state to the changelog; its offset is stored once that is delivered.
    private func checkpoint(_ lane: PartitionLane) async {
        do {
            try await writeCheckpoint(lane)
        } catch {
            logger.error("checkpoint failed: \(error)", metadata: ["partition": "\(lane.id)"])
        }
    }

    private func writeCheckpoint(_ lane: PartitionLane) async throws {
        guard let changelog = service.changelog, lane.dirty, !lane.next.isEmpty else { return }
        let offsets = lane.next.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
            .sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        let record = try changelog.record(state: lane.runner!.state, offsets: offsets, for: lane.id)
        try await submit([record], sources: [Pending.checkpointRecord], inputs: [], to: lane, storeOffsets: offsets)
        lane.dirty = false
        lane.lastCheckpoint = .now
        counters.checkpoints.add(1)
        service.metrics.checkpoints.increment()
    }

    /// Lets time pass for every partition's state (closes windows on an idle stream), then
    /// checkpoints the states that are due.
    private func advance(now: Int64) async throws {
        for lane in lanes.values {
            try await storeRestoredOffsets(lane)
            if lane.runner != nil { try enterTransaction(lane, first: [:]) }
            guard let out = lane.runner?.advance(context: StageContext(now: now)) else { continue }
            if !out.records.isEmpty || !out.failures.isEmpty {
                var outgoing: [ProducerRecord] = []
                var sources: [Int32] = []
                service.append(out, of: .advance(at: now), source: Pending.noInput, to: &outgoing, sources: &sources)
                if service.changelog != nil { lane.dirty = true }
                try await submit(outgoing, sources: sources, inputs: [], to: lane, storeOffsets: [])
            }
            if transaction == nil, ContinuousClock.now - lane.lastCheckpoint >= definition.checkpointInterval { await checkpoint(lane) }
        }
    }

    // MARK: Exactly-once

    /// Opens a transaction if none is, and remembers how the lane looked before it (once per
    /// transaction) and where its inputs begin, to abort to. Called before the lane's state changes.
    private func enterTransaction(_ lane: PartitionLane, first: [TopicPartition: Int64]) throws {
        guard transaction != nil else { return }
        if transaction!.openedAt == nil {
            try producer.beginTransaction()
            transaction!.openedAt = .now
            transaction!.producedBefore = counters.produced.value
            transaction!.deadLetteredBefore = counters.deadLettered.value
        }
        if transaction!.undo[lane.id] == nil {
            transaction!.undo[lane.id] = OpenTransaction.Undo(runner: lane.runner, next: lane.next, dirty: lane.dirty)
        }
        for (tp, offset) in first where transaction!.undo[lane.id]!.first[tp] == nil {
            transaction!.undo[lane.id]!.first[tp] = offset
        }
    }

    /// Commits the open transaction: the states it changed go to the changelog, every output is
    /// delivered, and the input offsets are committed with it. If it cannot commit, it is aborted
    /// and its inputs are processed again (``abortTransaction(after:)``). Throws only when the
    /// producer was fenced (a newer instance owns the work: this one must stop) or aborts keep failing.
    private func commitTransaction(_ reason: String) async throws {
        guard transaction?.isOpen == true else { return }
        do {
            for lane in lanes.values { try await writeCheckpoint(lane) }
            for lane in lanes.values { await lane.settled() }
            if let failed = settler.transaction?.take() { throw failed }
            var offsets: [TopicPartitionOffset] = []
            for lane in lanes.values {
                for (tp, next) in lane.next where lane.committedNext[tp] != next {
                    offsets.append(TopicPartitionOffset(tp.topic, tp.partition, offset: next))
                }
            }
            let timeout = service.settings.transactionTimeout
            if !offsets.isEmpty, let fault = service.settings.transactionFault?() { throw fault }
            if !offsets.isEmpty {
                try await producer.sendOffsetsToTransaction(offsets, group: consumer.groupMetadata(), timeout: timeout)
            }
            try await commitRetrying(timeout: timeout)
            for lane in lanes.values { lane.committedNext = lane.next }
            counters.transactionsCommitted.add(1)
            service.metrics.transactionsCommitted.increment()
            transaction!.closed()
            transaction!.abortsInARow = 0
            service.health.committed(ok: true)
        } catch {
            if let kafka = error as? KafkaError, kafka.isFatal {
                logger.error("exactly-once: the producer was fenced or failed for good; stopping (\(reason)): \(kafka)")
                throw kafka
            }
            try await abortTransaction(after: error, reason: reason)
        }
    }

    /// `commit_transaction`, repeated while librdkafka says a retry may succeed.
    private func commitRetrying(timeout: Duration) async throws(KafkaError) {
        var attempt = 1
        while true {
            do {
                try await producer.commitTransaction(timeout: timeout)
                return
            } catch {
                guard error.isRetriable, !error.requiresAbort, !error.isFatal, attempt < definition.retry.attempts else { throw error }
                attempt += 1
                try? await Task.sleep(for: definition.retry.backoff(beforeAttempt: attempt))
            }
        }
    }

    /// Aborts the open transaction (nothing of it becomes visible, its offsets are not committed)
    /// and rewinds: each lane it touched gets back its state and offsets, and each partition is
    /// read again from the transaction's first input. Backs off before going on; throws after
    /// the retry policy's attempts of aborts in a row, or when the abort itself fails for good.
    private func abortTransaction(after error: any Error, reason: String) async throws {
        guard var open = transaction else { return }
        counters.commitFailures.add(1)
        service.metrics.commitFailures.increment()
        service.health.committed(ok: false)
        logger.warning("exactly-once: transaction aborted (\(reason)): \(error)")
        try await producer.abortTransaction(timeout: service.settings.transactionTimeout)
        for lane in lanes.values { await lane.settled() }
        _ = settler.transaction?.take()
        counters.abortedOutputs.add(counters.produced.value - open.producedBefore)
        counters.abortedDeadLetters.add(counters.deadLettered.value - open.deadLetteredBefore)
        counters.transactionsAborted.add(1)
        service.metrics.transactionsAborted.increment()
        var seeks: [TopicPartitionOffset] = []
        for (id, undo) in open.undo {
            guard let lane = lanes[id] else { continue }
            for (tp, first) in undo.first {
                if let reached = lane.next[tp], reached > first { lane.staleAbove[tp] = reached - 1 }
                seeks.append(TopicPartitionOffset(tp.topic, tp.partition, offset: first))
            }
            lane.runner = undo.runner
            lane.next = undo.next
            lane.dirty = undo.dirty
        }
        open.closed()
        open.abortsInARow += 1
        transaction = open
        if !seeks.isEmpty {
            do {
                try consumer.seek(seeks)
            } catch {
                // A partition that is no longer assigned: its next owner starts from the commit.
                logger.info("exactly-once: rewinding after the abort: \(error)")
            }
        }
        if open.abortsInARow >= definition.retry.attempts {
            throw KafkaError(code: .broker, message: "exactly-once: \(open.abortsInARow) transactions in a row aborted; last: \(error)")
        }
        try? await Task.sleep(for: definition.retry.backoff(beforeAttempt: open.abortsInARow + 1))
    }

    private func commit(_ reason: String) async {
        do {
            try await consumer.commit()
            service.health.committed(ok: true)
        } catch {
            // A lost assignment or a group mid-rebalance: the next owner reads from the last
            // commit. Never a reason to stop the worker; failing for long turns it not-ready.
            counters.commitFailures.add(1)
            service.metrics.commitFailures.increment()
            service.health.committed(ok: false)
            if let suppressed = service.logLimiter.admit("commit-failure") {
                logger.warning("commit on \(reason) failed: \(error)", metadata: ["suppressed-before": "\(suppressed)"])
            }
        }
    }

    /// Lag per partition (from the high watermark of the last fetch, which every broker reports
    /// right), queue depths, librdkafka statistics and group state, once per tick.
    private func observe() {
        let now = Self.wallClock()
        var total: Int64 = 0
        for lane in lanes.values {
            for (tp, gauges) in lane.lagGauges {
                guard let high = consumer.cachedHighWatermark(tp), high >= 0 else { continue }
                let position = lane.next[tp] ?? high
                let lag = max(0, high - position)
                total += lag
                gauges.records.record(lag)
                gauges.seconds.record(lag > 0 && lane.lastTimestamp > 0 ? Double(max(0, now - lane.lastTimestamp)) / 1000 : 0)
            }
        }
        service.health.lag(records: total)
        service.metrics.producerQueue.record(producer.inFlight)
        service.metrics.inFlightRecords.record(backpressure.inFlight.records)
        service.metrics.pausedPartitions.record(counters.pausedPartitions.value)
        if let stats = consumer.statistics {
            counters.fetchedRecords.store(Int(stats.receivedMessages), ordering: .relaxed)
            StageMetrics.report(stats, group: definition.group)
            if let group = stats.group { service.health.groupState(joinState: group.joinState, assignmentSize: group.assignmentSize) }
        }
        if let stats = producer.statistics { StageMetrics.report(stats, group: nil) }
    }

    /// Settles every lane after a final checkpoint (the consumer's close then commits).
    /// Exactly-once: commits the open transaction (or aborts it: the next owner redoes its inputs).
    func shutdown() async {
        if transaction != nil {
            do {
                try await commitTransaction("shutdown")
            } catch {
                logger.warning("the last transaction did not commit: \(error)")
            }
        } else {
            for lane in lanes.values {
                try? await storeRestoredOffsets(lane)
                await checkpoint(lane)
            }
        }
        for lane in lanes.values { await lane.finish() }
        lanes.removeAll()
    }
}
