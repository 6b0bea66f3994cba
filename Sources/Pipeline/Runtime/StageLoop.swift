import Deadlines
import Foundation
import Kafka
import Logging
import Workers

/// What the event loop reacts to: a consumer event (acknowledged when handled), a timer tick, or
/// an error that stops the worker (the consumer's, or a settlement queue's).
enum LoopInput: Sendable {
    case event(ConsumerEvent, CheckedContinuation<Void, Never>)
    case tick
    case failed(any Error)
}

/// What the loop runs: an ordered stage (a chain from the catalogue, one copy per lane, with its
/// changelog when it keeps state), or a concurrent I/O stage.
enum StageWork: Sendable {
    case ordered(template: TransformRunner, changelog: Changelog?)
    case concurrent(any ConcurrentTransform, gate: AsyncGate)
}

/// What the event loop needs of its worker, and nothing more: the stage's definition and
/// settings, what it runs, where it records, reports health and logs.
struct LoopContext: Sendable {
    let definition: Topology.Stage
    let settings: WorkerSettings
    let work: StageWork
    /// The transform or chain this stage runs (`dead-letter.transform`).
    let transformName: String
    let recorder: StageRecorder
    /// Whether this worker may still own its partitions after a long pause.
    let membership: MembershipGate
    let health: WorkerHealth
    let logLimiter: LogRateLimiter
    let logger: Logger
    /// Begins a graceful stop (``WorkerSettings/stopAfterInputs``).
    let requestStop: @Sendable () -> Void

    var changelog: Changelog? {
        if case .ordered(_, let changelog) = work { return changelog }
        return nil
    }

    /// An input a redrive sent back for another stage (`dead-letter.redrive-for` names it):
    /// this stage skips it, its offset settles like any other.
    @inline(__always)
    func isRedriveForAnotherStage(_ record: borrowing ConsumerRecord) -> Bool {
        if record.headers.isEmpty { return false }
        for h in record.headers where h.key == DeadLetterHeader.redriveFor {
            return !(h.value ?? []).elementsEqual(definition.name.utf8)
        }
        return false
    }

    /// The dead letters of `failures` (all of `input`), logged, rate-limited.
    func deadLetters(_ failures: some Collection<DecodeFailure>, of input: InputRecord) -> [ProducerRecord] {
        for f in failures {
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
        return RecordMapping.deadLetters(failures, of: input, stage: definition.name, transform: transformName, topic: definition.deadLetterTopic)
    }

    /// Outputs (`sources[i]`: output `i`'s input, stamped `timestamp(sources[i])`) and dead
    /// letters (tagged ``SettlementQueue/Delivery/noInput``) as one batch to produce, with the
    /// sources of its records.
    func outgoing(
        _ out: inout TransformOutput, sources: [Int32], timestamp: (Int32) -> Int64, deadLetters: [ProducerRecord]
    ) -> (records: ProducerBatch, sources: [Int32]) {
        var batch = ProducerBatch(reservingCapacity: out.count + deadLetters.count, bytesPerRecord: 0)
        RecordMapping.append(
            &out, sources: sources, timestamp: timestamp, topic: definition.topic(forOutput:),
            identifiesByContent: definition.identifiesByContent(topic:), to: &batch)
        var sources = sources
        for d in deadLetters {
            batch.append(d)
            sources.append(SettlementQueue.Delivery.noInput)
        }
        return (batch, sources)
    }

    /// One input's (or an `advance`'s) outputs and dead letters as one batch, with the input's timestamp.
    func outgoing(_ out: inout TransformOutput, of input: InputRecord, source: Int32) -> (records: ProducerBatch, sources: [Int32]) {
        let deadLetters = deadLetters(out.failures, of: input)
        let sources = [Int32](repeating: source, count: out.count)
        return outgoing(&out, sources: sources, timestamp: { _ in input.timestamp }, deadLetters: deadLetters)
    }
}

/// The worker's event loop: owns the partition lanes and their stage states, and is confined to
/// the task that runs ``StageService/run()``. Per partition it runs the stage in offset order,
/// submits outputs and dead letters, and enqueues them, then checkpoints and offsets, on the
/// lane's ``SettlementQueue``; when they become durable is the ``DeliveryGuarantee``'s business.
final class StageLoop {
    let context: LoopContext
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    /// Reads changelogs (a stateful stage only).
    let reader: KafkaConsumer?
    let guarantee: any DeliveryGuarantee
    let backpressure: Backpressure
    let settlement: SettlementQueue.Context
    private var lanes: [TopicPartition: PartitionLane] = [:]
    /// Consumer events received so far (the consumer's numbering: the forwarder hands on each).
    private var eventIndex = 0
    /// Inputs handed to the stage so far (`stopAfterInputs`).
    private var processedInputs = 0
    /// Bytes of output per input in the last batch: what the next batch's buffer reserves.
    private var outputBytesPerInput = 256
    private var definition: Topology.Stage { context.definition }
    private var logger: Logger { context.logger }

    init(
        context: LoopContext, consumer: KafkaConsumer, producer: KafkaProducer, reader: KafkaConsumer?, guarantee: any DeliveryGuarantee,
        backpressure: Backpressure, settlement: SettlementQueue.Context
    ) {
        self.context = context
        self.consumer = consumer
        self.producer = producer
        self.reader = reader
        self.guarantee = guarantee
        self.backpressure = backpressure
        self.settlement = settlement
    }

    static func wallClock() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func run(_ inputs: AsyncStream<LoopInput>) async throws {
        for await input in inputs {
            context.health.loopTurned()
            let started = ContinuousClock.now
            defer { context.recorder.loopTurned(busy: ContinuousClock.now - started) }
            switch input {
            case .event(let event, let ack):
                eventIndex += 1
                do {
                    try await handle(event)
                } catch {
                    ack.resume()
                    throw error
                }
                ack.resume()
                if let limit = context.settings.stopAfterInputs, processedInputs >= limit { context.requestStop() }
            case .tick:
                try await advance(now: Self.wallClock())
                try await guarantee.makeDurable(.tick, lanes: Array(lanes.values))
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
            try await guarantee.makeDurable(.batch, lanes: Array(lanes.values))
        case .assigned(let partitions):
            context.membership.confirmed()
            logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            try await assign(partitions, startAtCheckpoints: true)
            if backpressure.gate == .paused { try? consumer.pause(partitions) }
            context.health.assigned(total: assignedCount)
            context.recorder.rebalanced(assigned: assignedCount)
        case .revoked(let partitions):
            context.membership.confirmed()
            logger.info("partitions revoked", metadata: ["partitions": "\(partitions)"])
            context.health.revoked(total: max(0, assignedCount - partitions.count))
            let going = lanes(of: partitions)
            // A lane that goes checkpoints its state; everything it owes becomes durable first.
            if let changelog = context.changelog {
                for lane in going where lane.dirty { try lane.checkpoint(to: changelog) }
            }
            try await guarantee.makeDurable(.revocation(going), lanes: Array(lanes.values))
            await remove(going)
            context.recorder.rebalanced(assigned: assignedCount)
        case .lost(let partitions):
            logger.warning("partitions lost (this member's session expired); their new owner takes over from the last commit", metadata: ["partitions": "\(partitions)"])
            context.health.revoked(total: max(0, assignedCount - partitions.count))
            let going = lanes(of: partitions)
            for lane in going { lane.settlement.abandon() }
            context.membership.confirmed()
            try await guarantee.makeDurable(.lost(going), lanes: Array(lanes.values))
            await remove(going)
            context.recorder.rebalanced(assigned: assignedCount)
        case .endOfPartition:
            break
        }
    }

    /// The lanes of these input partitions (a joined lane goes with the first of its partitions:
    /// they are assigned and revoked together; one left behind gets a lane again, restored, at
    /// its next record).
    private func lanes(of partitions: [TopicPartition]) -> [PartitionLane] {
        var seen = Set<TopicPartition>()
        return partitions.compactMap { tp in
            let id = laneID(tp)
            guard seen.insert(id).inserted else { return nil }
            return lanes[id]
        }
    }

    private func remove(_ going: [PartitionLane]) async {
        for lane in going {
            lanes[lane.id] = nil
            await lane.finish()
            for gauges in lane.lagGauges.values {
                gauges.records.record(0)
                gauges.seconds.record(0)
            }
        }
    }

    /// The lane an input partition belongs to: its own, or for a stage that joins its inputs,
    /// the one of that partition number across every input topic.
    private func laneID(_ tp: TopicPartition) -> TopicPartition {
        definition.joinsInputs ? TopicPartition(definition.inputs.joined(separator: "+"), tp.partition) : tp
    }

    /// Input partitions held in lanes.
    private var assignedCount: Int { definition.joinsInputs ? lanes.count * definition.inputs.count : lanes.count }

    private func makeLane(_ id: TopicPartition) -> PartitionLane {
        let members = definition.joinsInputs ? definition.inputs.map { TopicPartition($0, id.partition) } : [id]
        var runner: TransformRunner?
        if case .ordered(let template, _) = context.work { runner = template }
        return PartitionLane(
            id: id, partitions: members, runner: runner, settlement: SettlementQueue(partitions: members, context: settlement),
            lagGauges: Dictionary(uniqueKeysWithValues: members.map { ($0, context.recorder.metrics.lag($0)) }))
    }

    /// New partitions get a lane. A stateful stage's state is restored before their first record.
    /// With `startAtCheckpoints` (while the assignment event is handled) each restored partition
    /// starts at the offset its checkpoint covers, not at the group's commit: the state and the
    /// position agree even when the commit is behind the checkpoint (a stop between the two) or
    /// ahead of it (a checkpoint of an older state, e.g. one written by a member that was stopped
    /// past its session and came back). Otherwise (a record of a partition without a lane)
    /// inputs the state already holds are skipped.
    private func assign(_ partitions: [TopicPartition], startAtCheckpoints: Bool) async throws {
        var ids: [TopicPartition] = []
        for tp in partitions where lanes[laneID(tp)] == nil && !ids.contains(laneID(tp)) { ids.append(laneID(tp)) }
        var restored: [TopicPartition: Changelog.Checkpoint] = [:]
        if case .ordered(let template, let changelog?) = context.work, let reader, !ids.isEmpty {
            if definition.delivery == .exactlyOnce {
                restored = try await restoreCoveringCommits(ids, changelog: changelog, stateType: template.stateType, reader: reader)
            } else {
                restored = try await changelog.restore(ids, stateType: template.stateType, using: reader)
            }
        }
        var starts: [TopicPartitionOffset] = []
        for id in ids {
            let lane = makeLane(id)
            if let checkpoint = restored[id] {
                try lane.runner?.restore(checkpoint.state)
                lane.skipBelow = checkpoint.offsets
                lane.next = checkpoint.offsets
                lane.restoredOffsets = checkpoint.offsets.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
                starts += lane.restoredOffsets
                context.recorder.restored()
                logger.info("state restored", metadata: ["partition": "\(id)", "offsets": "\(checkpoint.offsets.values.sorted())"])
            }
            lanes[id] = lane
        }
        // During the assignment event a seek sets where the partition starts.
        if startAtCheckpoints, !starts.isEmpty { try await consumer.seek(starts) }
    }

    /// Exactly once: a checkpoint and the group's offsets commit in one transaction, so the state
    /// to restore is the one that covers the committed offsets. The committed offsets are read
    /// first: a `read_committed` consumer asks for stable offsets (KIP-447), which waits while a
    /// transaction holding offsets of the group is open (a predecessor killed mid-transaction,
    /// until the broker aborts it). The changelog, read to its last stable offset, may still end
    /// before the newest committed checkpoint (a transaction left open by a predecessor freezes
    /// that offset): it is read again until the checkpoint covers the committed offsets, for up
    /// to the transaction timeout; past it the worker goes on with what it read, and says so.
    private func restoreCoveringCommits(
        _ ids: [TopicPartition], changelog: Changelog, stateType: any Decodable.Type, reader: KafkaConsumer
    ) async throws -> [TopicPartition: Changelog.Checkpoint] {
        let members = ids.flatMap { id in definition.joinsInputs ? definition.inputs.map { TopicPartition($0, id.partition) } : [id] }
        let wait = context.settings.transactionTimeout + .seconds(10)
        let committed = Dictionary(
            try await consumer.committed(members, timeout: wait).filter { $0.offset >= 0 }.map { ($0.topicPartition, $0.offset) },
            uniquingKeysWith: max)
        let giveUp = ContinuousClock.now + wait
        var pause = Duration.milliseconds(100)
        while true {
            let restored = try await changelog.restore(ids, stateType: stateType, using: reader)
            let behind = members.filter { tp in
                guard let commit = committed[tp] else { return false }
                return (restored[laneID(tp)]?.offsets[tp] ?? -1) < commit
            }
            if behind.isEmpty { return restored }
            guard ContinuousClock.now + pause < giveUp else {
                logger.warning(
                    "the changelog holds no checkpoint covering the group's committed offsets; restoring the newest one it holds",
                    metadata: ["partitions": "\(behind)", "committed": "\(behind.map { committed[$0]! })"])
                return restored
            }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .seconds(2))
        }
    }

    private func process(_ batch: [ConsumerRecord]) async throws {
        // A batch holds records of one or more partitions, each in offset order.
        var start = 0
        while start < batch.count {
            let tp = batch[start].topicPartition
            // Where this partition's run ends, read in place: `batch[i]` copies the whole record
            // (a retain and a release of each of its references) to compare two fields.
            let end = batch.withUnsafeBufferPointer { records in
                var end = start + 1
                while end < records.count, records[end].partition == tp.partition, records[end].topic == tp.topic { end += 1 }
                return end
            }
            if lanes[laneID(tp)] == nil { try await assign([tp], startAtCheckpoints: false) }
            let lane = lanes[laneID(tp)]!
            if let stale = lane.staleThrough[tp] {
                // Fetched before the partition was rewound (an event the forwarder already held).
                guard eventIndex > stale else {
                    start = end
                    continue
                }
                lane.staleThrough[tp] = nil
            }
            switch context.work {
            case .ordered(_, let changelog): try await process(batch[start..<end], lane: lane, changelog: changelog)
            case .concurrent(let stage, let gate): try startConcurrent(batch[start..<end], lane: lane, stage: stage, gate: gate)
            }
            start = end
        }
    }

    /// Runs the ordered stage over one partition's records and submits what it made: for a
    /// stateless stage with the offset after them, for a stateful one without (its offsets go
    /// with its checkpoints).
    private func process(_ records: ArraySlice<ConsumerRecord>, lane: PartitionLane, changelog: Changelog?) async throws {
        guard let tp = records.first?.topicPartition else { return }
        let skipBelow = lane.skipBelow[tp] ?? -1
        guard let first = records.first(where: { $0.offset >= skipBelow }) else { return }
        try guarantee.willChange(lane, first: [tp: first.offset])
        lane.settleRestoredOffsets()
        let now = Self.wallClock()
        let started = ContinuousClock.now
        // One output buffer for the whole stretch: the stage writes into it, the producer's batch takes it over.
        var out = TransformOutput(reservingCapacity: records.count, bytesPerRecord: outputBytesPerInput)
        // Outputs to topics declared `dedupe-key: content` get no key written, inputs from one
        // are identified by content (a set per stretch, empty for most stages).
        out.outputsIdentifiedByContent = definition.outputsIdentifiedByContent
        let identifiedByContent = definition.identifiesByContent(topic: tp.topic)
        var sources: [Int32] = []
        var inputs: [InputRecord] = []
        var deadLetters: [ProducerRecord] = []
        sources.reserveCapacity(records.count)
        inputs.reserveCapacity(records.count)
        var last: Int64 = first.offset
        var skipped = 0
        var lastTimestamp: Int64?
        // The records are read in place (an unsafe buffer's element is borrowed), each input is
        // moved into the list, and the lane's stage is taken out of the lane for the stretch (one
        // exclusivity check, not one per record): BENCHMARKS.md, "Whole processes", has what it saved.
        var runner = lane.runner!
        lane.runner = nil
        let context = self.context
        records.withUnsafeBufferPointer { records in
            for i in records.indices where records[i].offset >= skipBelow {
                last = records[i].offset
                if context.isRedriveForAnotherStage(records[i]) {
                    skipped += 1
                    continue
                }
                let input = RecordMapping.input(records.baseAddress! + i, now: now, identifiedByContent: identifiedByContent)
                let index = Int32(inputs.count)
                let failed = out.failures.count
                runner.process(input, context: TransformContext(now: input.timestamp), into: &out)
                // A stage only appends: earlier inputs' outputs are not its to remove (a programming error).
                precondition(out.count >= sources.count, "transform \(context.transformName) removed outputs of earlier inputs from its TransformOutput")
                while sources.count < out.count { sources.append(index) }
                if out.failures.count > failed { deadLetters += context.deadLetters(out.failures[failed...], of: input) }
                lastTimestamp = input.timestamp
                inputs.append(consume input)
            }
        }
        lane.runner = runner
        if let lastTimestamp { lane.lastTimestamp = lastTimestamp }
        lane.next[tp] = last + 1
        outputBytesPerInput = max(16, out.byteCount / max(1, inputs.count))
        let outgoing: ProducerBatch
        (outgoing, sources) = context.outgoing(&out, sources: sources, timestamp: { inputs[Int($0)].timestamp }, deadLetters: deadLetters)
        processedInputs += inputs.count
        context.recorder.processed(inputs.count, startedAt: started, took: ContinuousClock.now - started)
        context.health.progressed()
        if let changelog {
            lane.dirty = true
            try await submit(outgoing, sources: sources, inputs: inputs, skipped: skipped, to: lane, offsets: [])
            if guarantee.checkpointDue(lane) { try lane.checkpoint(to: changelog) }
        } else {
            try await submit(outgoing, sources: sources, inputs: inputs, skipped: skipped, to: lane, offsets: [TopicPartitionOffset(tp.topic, tp.partition, offset: last + 1)])
        }
    }

    /// A concurrent stage: each record becomes a task (bounded by the stage's concurrency) that
    /// runs the stage and submits the outputs once every earlier record of the same key has
    /// submitted its own. The lane settles the tasks in offset order, so an offset becomes
    /// durable only when it and every earlier input of the partition are done.
    private func startConcurrent(_ records: ArraySlice<ConsumerRecord>, lane: PartitionLane, stage: any ConcurrentTransform, gate: AsyncGate) throws {
        guard let first = records.first else { return }
        try guarantee.willChange(lane, first: [first.topicPartition: first.offset])
        let now = Self.wallClock()
        let producer = self.producer, context = self.context, undeliverable = guarantee.undeliverable
        let budget: Duration? = definition.delivery == .exactlyOnce ? context.settings.transactionTimeout / 2 : nil
        var heldBytes = 0
        for record in records {
            let input = RecordMapping.input(record, now: now, identifiedByContent: definition.identifiesByContent(topic: record.topic))
            let bytes = (record.valueBytes?.count ?? 0) + (record.key?.count ?? 0)
            let earlier = lane.lastDelivery(forKey: record.key)
            let skip = context.isRedriveForAnotherStage(record)
            let delivery = Promise<SettlementQueue.Delivery>()
            // The record's work is the transform's, which may not end when cancelled: it runs in
            // a task of its own, so that past the shutdown deadline the worker gives it up (the
            // settlement stops waiting for its delivery) instead of waiting for it.
            Task {
                await gate.acquire()
                let began = ContinuousClock.now
                var out: TransformOutput
                if skip {
                    // Redriven for another stage: nothing to do, the offset settles in order.
                    out = TransformOutput()
                } else if let budget {
                    // The record's outputs must reach the open transaction before the broker
                    // aborts it: past the budget the record is dead-lettered instead (its work
                    // goes on in the background and is dropped).
                    out = await Deadline.race(budget) { await stage.process(input) }
                        ?? TransformOutput(failures: [DecodeFailure(field: "$", reason: .timedOut, detail: "not done within \(budget) (exactly once: half the transaction timeout)")])
                } else {
                    out = await stage.process(input)
                }
                gate.release()
                context.recorder.concurrentRecordTook(ContinuousClock.now - began)
                var (outgoing, sources) = context.outgoing(&out, of: input, source: 0)
                if let diverted = undeliverable?.divert(
                    outgoing, sources: sources, inputs: [input], stage: context.definition.name, transform: context.transformName,
                    deadLetterTopic: context.definition.deadLetterTopic)
                {
                    (outgoing, sources) = diverted
                }
                // Same key, input order: submit after the earlier record of the key submitted.
                _ = await earlier?.value()
                // No ticket when the producer was closed: settled as not delivered, and what it
                // holds in flight is released all the same.
                let ticket = try? await producer.submit(outgoing)
                delivery.fulfil(SettlementQueue.Delivery(
                    records: outgoing, sources: sources, inputs: [input], ticket: ticket,
                    offsets: [TopicPartitionOffset(record.topic, record.partition, offset: record.offset + 1)],
                    inputCount: 1, heldRecords: 1, heldBytes: bytes))
            }
            lane.enqueue(delivery, key: record.key)
            lane.next[record.topicPartition] = record.offset + 1
            lane.lastTimestamp = input.timestamp
            heldBytes += bytes
        }
        processedInputs += records.count
        context.recorder.processed(records.count, startedAt: .now, took: nil)
        context.health.progressed()
        if backpressure.add(records: records.count, bytes: heldBytes) { boundReached() }
    }

    private func submit(
        _ records: ProducerBatch, sources: [Int32], inputs: [InputRecord], skipped: Int = 0, to lane: PartitionLane, offsets: [TopicPartitionOffset]
    ) async throws {
        var records = records, sources = sources
        if let diverted = guarantee.undeliverable?.divert(
            records, sources: sources, inputs: inputs, stage: definition.name, transform: context.transformName,
            deadLetterTopic: definition.deadLetterTopic)
        {
            (records, sources) = diverted
        }
        let bytes = records.byteCount
        let ticket = try await producer.submit(records)
        lane.enqueue(.delivery(SettlementQueue.Delivery(
            records: records, sources: sources, inputs: inputs, ticket: ticket, offsets: offsets,
            // Inputs redriven for another stage were skipped: settled all the same.
            inputCount: inputs.count + skipped, heldRecords: records.count, heldBytes: bytes)))
        if backpressure.add(records: records.count, bytes: bytes) { boundReached() }
    }

    /// The in-flight bound was just crossed: the forwarder waits for deliveries before it takes
    /// the next batch. Counted, and logged at most 10 times per 10 s.
    private func boundReached() {
        context.recorder.boundReached()
        if let suppressed = context.logLimiter.admit("in-flight-bound") {
            logger.info(
                "in-flight bound reached: waiting for deliveries before taking more input",
                metadata: ["records": "\(backpressure.inFlight.records)", "suppressed-before": "\(suppressed)"])
        }
    }

    /// Lets time pass for every partition's state (closes windows on an idle stream), then
    /// checkpoints the states that are due.
    private func advance(now: Int64) async throws {
        guard case .ordered(_, let changelog) = context.work else { return }
        for lane in lanes.values {
            try guarantee.willChange(lane, first: [:])
            lane.settleRestoredOffsets()
            guard var out = lane.runner?.advance(context: TransformContext(now: now)) else { continue }
            if out.count > 0 || !out.failures.isEmpty {
                let (outgoing, sources) = context.outgoing(&out, of: .advance(at: now), source: SettlementQueue.Delivery.noInput)
                if changelog != nil { lane.dirty = true }
                try await submit(outgoing, sources: sources, inputs: [], to: lane, offsets: [])
            }
            if let changelog, lane.dirty, guarantee.checkpointDue(lane) { try lane.checkpoint(to: changelog) }
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
        context.health.lag(records: total)
        let stats = consumer.statistics
        context.recorder.observed(
            producerQueue: producer.inFlight, inFlightRecords: backpressure.inFlight.records, consumer: stats, producer: producer.statistics,
            group: definition.group)
        if let group = stats?.group { context.health.groupState(joinState: group.joinState, assignmentSize: group.assignmentSize) }
    }

    /// Checkpoints every changed state, makes everything durable, and settles every lane (the
    /// consumer's close then commits, at least once).
    func shutdown() async throws {
        if let changelog = context.changelog {
            for lane in lanes.values where lane.dirty { try lane.checkpoint(to: changelog) }
        }
        try await guarantee.makeDurable(.shutdown, lanes: Array(lanes.values))
        for lane in lanes.values { await lane.finish() }
        lanes.removeAll()
    }
}
