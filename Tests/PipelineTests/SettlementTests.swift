import Deadlines
import Foundation
import MetricsTestKit
import Synchronization
import Testing
@testable import Kafka
import Operations
@testable import Pipeline
import PipelineTesting
import Workers

/// The order in which a partition settles what it owes the broker (outputs and dead letters of
/// each input, then its checkpoint, then its offset) when deliveries are slow or failing, on
/// librdkafka's mock cluster: two brokers, one of them taken down under a topic.
@Suite(.serialized, .timeLimit(.minutes(3))) struct SettlementTests {
    static let candlesTopology = """
        topics:
          - {name: prices.raw}
          - {name: prices.candles}
          - {name: prices.changelog, config: {cleanup.policy: compact}}
          - {name: dlq}
        stages:
          - name: candles
            chain: [prices.candles]
            inputs: [prices.raw]
            outputs: {prices.candles.1m: prices.candles}
            dead-letter-topic: dlq
            changelog: prices.changelog
            checkpoint-interval: 50ms
            advance-interval: 50ms
        """

    /// A two-broker mock cluster with the candle topology's topics, each of one partition: every
    /// topic led by broker 1 except `onBroker2`, and `inputs` ticks in `prices.raw`.
    static func cluster(onBroker2: [String], inputs: Int) async throws -> (KafkaMockCluster, [(record: ProducerRecord, report: DeliveryReport)]) {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["prices.raw", "prices.candles", "prices.changelog", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: onBroker2.contains(t) ? 2 : 1)
        }
        mock.setCoordinator("group", key: "candles", brokerID: 1)
        return (mock, try await produce(0..<inputs, to: mock))
    }

    static func produce(_ range: Range<Int>, to mock: KafkaMockCluster) async throws -> [(record: ProducerRecord, report: DeliveryReport)] {
        guard !range.isEmpty else { return [] }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let records = range.map { PriceTicks.tick($0) }
        let reports = try await producer.send(records)
        await producer.close()
        #expect(reports.allSatisfy { $0.error == nil })
        return Array(zip(records, reports)).map { (record: $0.0, report: $0.1) }
    }

    static func settings(_ mock: KafkaMockCluster) -> WorkerSettings {
        var settings = WorkerSettings(bootstrapServers: [mock.bootstrapServers])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.statisticsInterval = nil
        return settings
    }

    /// Every record of a topic's partition 0, read to its end without a group.
    static func read(_ topic: String, from mock: KafkaMockCluster) async throws -> [ConsumerRecord] {
        var records: [ConsumerRecord] = []
        try await TopicReader(kafka: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
            .read(from: [TopicPartitionOffset(topic, 0, offset: TopicPartitionOffset.beginning)]) { batch in
                records += batch
                return true
            }
        return records
    }

    /// How `run()` ended, if it did within `limit`: its error, or "returned without an error".
    static func stopped(_ service: StageService, within limit: Duration) async -> String? {
        await Deadline.race(limit) { () -> String in
            do {
                try await service.run()
                return "returned without an error"
            } catch {
                return "\(error)"
            }
        }
    }

    /// The input offset a checkpoint covers (the next offset after its inputs).
    static func coveredOffset(_ checkpoint: ConsumerRecord) -> Int64? {
        checkpoint.header(Changelog.offsetsHeader).flatMap { Changelog.offsets(String(decoding: $0, as: UTF8.self)) }?.values.max()
    }

    /// A checkpoint must not become durable before the outputs of the inputs it covers: a
    /// crash would restore it and skip those inputs, whose outputs were never delivered. Here
    /// the candle topic's leader is down while 3,000 ticks are processed: no checkpoint may
    /// cover the input that closed the first candle until that candle is delivered. The test
    /// waits until a checkpoint of the state after every input is taken and waiting, and the
    /// producer holds nothing but the undelivered candles (anything handed to it for the
    /// changelog's broker, which is up, has been delivered by then); only then does it read the
    /// changelog. Once the broker is back everything is delivered and the last checkpoint
    /// covers every input.
    @Test func aCheckpointIsNeverDurableBeforeTheOutputsItCovers() async throws {
        let (mock, inputs) = try await Self.cluster(onBroker2: ["prices.candles"], inputs: 3_000)
        // The input after which the first candle is due: a checkpoint covering it covers that candle.
        var runner = try TransformCatalog().runner(for: ["prices.candles"])
        var firstCandle: Int64?
        var candlesDue = 0
        for (i, (record, _)) in inputs.enumerated() {
            let input = InputRecord(key: record.key, value: record.value, timestamp: record.timestamp ?? 0, origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: Int64(i)))
            let made = runner.process(input, context: TransformContext(now: input.timestamp)).records.count
            if made > 0, firstCandle == nil { firstCandle = Int64(i) }
            candlesDue += made
        }
        let first = try #require(firstCandle)
        mock.setBrokerDown(2)
        let topology = try Topology.parse(Self.candlesTopology)
        let service = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: Self.settings(mock).measured())
        let running = Task { try await service.run() }
        try await eventually("every input processed") { service.readings.processed == 3_000 }
        try await eventually("a checkpoint of every input waiting, and only the \(candlesDue) candles in the producer (a timeout: the checkpoint did not wait for them)") {
            service.readings.checkpointsWaiting >= 1 && service.readings.producerQueue == candlesDue
        }
        let premature = try await Self.read("prices.changelog", from: mock).compactMap(Self.coveredOffset).last { $0 > first }
        #expect(premature == nil, "a checkpoint covers the inputs up to offset \(premature ?? -1) while the candle of input \(first) is undelivered")

        mock.setBrokerUp(2)
        try await eventually("every input settled", within: .seconds(60)) { service.readings.inputsSettled == 3_000 }
        service.requestStop()
        try await running.value
        let checkpoints = try await Self.read("prices.changelog", from: mock)
        #expect(checkpoints.last.flatMap(Self.coveredOffset) == 3_000, "the last checkpoint covers every input")
        let reference = try PriceTicks.reference(inputs: inputs, stages: ["prices.candles"])
        let candles = Set(try await Self.read("prices.candles", from: mock).compactMap { $0.header(OutputRecord.dedupeKeyHeader) }.map { String(decoding: $0, as: UTF8.self) })
        #expect(candles == Set(reference.keys))
    }

    /// An output that cannot be delivered past its attempts (or that fails for good, on any
    /// configuration) goes to the dead-letter topic as itself, naming where it was going: a
    /// stateful stage cannot make it again from its input (the minute of a candle has closed
    /// and the tick is late), so dead-lettering the input would lose it. Here every candle fails:
    /// its leader is down while 3,000 ticks are processed with 2 attempts of 1.5 s each
    /// ("attempts"), or its leader refuses every produce with TOPIC_AUTHORIZATION_FAILED on the
    /// default retry policy ("permanent"). The operator fixes the broker and redrives every
    /// `delivery-failed` dead letter: every candle is then in its topic, with the content an
    /// uninterrupted run gives it, and a worker started again finds nothing to redo.
    @Test(arguments: ["attempts", "permanent"]) func undeliveredOutputsOfAStatefulStageComeBackWithARedrive(_ fault: String) async throws {
        let (mock, inputs) = try await Self.cluster(onBroker2: ["prices.candles"], inputs: 3_000)
        let reference = try PriceTicks.reference(inputs: inputs, stages: ["prices.candles"])
        var settings = Self.settings(mock)
        var yaml = Self.candlesTopology
        if fault == "attempts" {
            yaml += "\n    retry: {attempts: 2, initial-backoff: 100ms, max-backoff: 500ms}"
            settings.messageTimeout = .milliseconds(1_500)
            mock.setBrokerDown(2)
        } else {
            // Produce (API key 0) to broker 2: refused, more times than there are candle batches.
            mock.pushRequestErrors(brokerID: 2, apiKey: 0, errorCodes: Array(repeating: 29, count: 400))
        }
        let topology = try Topology.parse(yaml)
        let service = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settings.measured())
        let running = Task { try await service.run() }
        try await eventually("every input settled", within: .seconds(90)) { service.readings.inputsSettled == 3_000 }
        service.requestStop()
        try await running.value
        // The operator's fix: the broker is back (or the topic moves to a broker that takes it).
        mock.setBrokerUp(2)
        mock.setPartitionLeader("prices.candles", partition: 0, brokerID: 1)
        #expect(try await Self.read("prices.candles", from: mock).isEmpty, "no candle delivered while the fault lasted")
        let entries = try await Self.read("dlq", from: mock).compactMap(DeadLetterEntry.init)
        #expect(entries.count == reference.count, "one dead letter per candle: \(entries.count) of \(reference.count)")
        for e in entries {
            #expect(e.letter.failure.reason == .deliveryFailed)
            #expect(e.letter.destination?.topic == "prices.candles", "it names where the candle was going")
            #expect(e.letter.origin.topic == "prices.raw" && e.letter.origin.offset >= 0, "and the tick that closed it")
        }
        var selection = DeadLetterSelection()
        selection.reasons = ["delivery-failed"]
        let plan = RedrivePlan(entries.filter(selection.matches), maxRedrives: 3)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let (sent, failed) = try await plan.execute(with: producer)
        await producer.close()
        #expect(failed.isEmpty && sent == entries.count)

        // A worker started again (as the operator's stage keeps running) redoes nothing.
        let again = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: Self.settings(mock).measured())
        let rerun = Task { try await again.run() }
        var candles: [String: [UInt8]] = [:]
        try? await eventually("every candle in its topic", within: .seconds(20)) {
            candles = [:]
            for r in try await Self.read("prices.candles", from: mock) {
                if let key = r.header(OutputRecord.dedupeKeyHeader) { candles[String(decoding: key, as: UTF8.self)] = r.value ?? [] }
            }
            return candles.count >= reference.count
        }
        again.requestStop()
        try await rerun.value
        let missing = Set(reference.keys).subtracting(candles.keys)
        #expect(missing.isEmpty, "\(missing.count) of \(reference.count) candles missing after the redrive, e.g. \(missing.sorted().prefix(3))")
        let different = reference.keys.filter { candles[$0] != nil && candles[$0] != reference[$0] }
        #expect(different.isEmpty, "\(different.count) candles differ from an uninterrupted run's, e.g. \(different.sorted().prefix(3))")
        #expect(again.readings.processed == 0, "nothing to redo from the input topic")
    }

    /// An evicted member's checkpoints never land after the new owner's. Member A's candle
    /// outputs are stuck (their leader is down) when member B joins: A's revocation waits for
    /// them, its poll thread is parked meanwhile, and librdkafka takes A out of the group past
    /// `max.poll.interval.ms`. B takes both partitions, restores A's last durable checkpoints and
    /// carries on. The broker comes back; A's outputs are delivered and its revocation checkpoint
    /// (older than B's state) is due. The coordinator must fence it: the last changelog record
    /// of each partition is B's, covering every input.
    @Test func anEvictedMembersCheckpointsNeverLandAfterTheNewOwners() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["prices.raw", "prices.candles", "prices.changelog", "dlq"] {
            try mock.createTopic(t, partitions: 2)
            for p in Int32(0)..<2 { mock.setPartitionLeader(t, partition: p, brokerID: t == "prices.candles" ? 2 : 1) }
        }
        mock.setCoordinator("group", key: "candles", brokerID: 1)
        let topology = try Topology.parse(Self.candlesTopology + "\n    retry: {attempts: 1000, initial-backoff: 2s, max-backoff: 2s}")
        var settings = Self.settings(mock)
        settings.maxPollInterval = .seconds(7)  // at least the session timeout (6 s)
        // The eager protocol: a member revokes everything before it rejoins, so one stuck in its
        // revocation misses the rebalance's deadline (max.poll.interval.ms) and is taken out.
        // (A cooperative member stays a member while it revokes; it is evicted when cut off
        // from the coordinator past its session, which no mock fault does to one client alone.)
        settings.kafka.raw["partition.assignment.strategy"] = "range"
        _ = try await Self.produce(0..<1_500, to: mock)
        let a = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settings.measured())
        let runningA = Task { try await a.run() }
        try await eventually("A settled the first inputs") { a.readings.inputsSettled == 1_500 }
        try await eventually("A's checkpoints of them") { a.readings.checkpoints >= 2 }

        mock.setBrokerDown(2)
        _ = try await Self.produce(1_500..<3_000, to: mock)
        try await eventually("A processed the inputs whose candles are stuck") { a.readings.processed == 3_000 }
        // B may wait longer in a revocation of its own (A rejoins once its revocation ends): on
        // a loaded machine its outputs can take more than A's 7 s, and B would be evicted too.
        var settingsB = settings
        settingsB.maxPollInterval = .seconds(60)
        let b = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settingsB.measured())
        let runningB = Task { try await b.run() }
        try await eventually("A evicted, B owns both partitions", within: .seconds(60)) { b.readings.restoredPartitions >= 2 }
        let checkpointsOfA = a.readings.checkpoints
        _ = try await Self.produce(3_000..<3_600, to: mock)
        a.requestStop()
        mock.setBrokerUp(2)
        try await eventually("B settled every input it owns", within: .seconds(60)) { b.readings.processed > 0 && b.readings.inputsSettled == b.readings.processed }
        _ = try? await runningA.value  // A stops once its revocation and shutdown are done (or given up)
        b.requestStop()
        try await runningB.value
        #expect(a.readings.checkpoints == checkpointsOfA, "A wrote \(a.readings.checkpoints - checkpointsOfA) checkpoints after it was evicted")

        let reader = try KafkaConsumer(configuration: {
            var c = ConsumerConfiguration(bootstrapServers: [mock.bootstrapServers], groupID: "check")
            c.reportEndOfPartition = true
            return c
        }())
        try await reader.assign((0..<2).map { TopicPartitionOffset("prices.changelog", Int32($0), offset: TopicPartitionOffset.beginning) })
        var last: [Int32: Int64] = [:]
        var ended = Set<Int32>()
        for try await event in reader {
            if case .records(let batch) = event {
                for r in batch {
                    let header = r.header(Changelog.offsetsHeader).map { String(decoding: $0, as: UTF8.self) }
                    for (tp, offset) in header.flatMap(Changelog.offsets) ?? [:] { last[tp.partition] = offset }
                }
            }
            if case .endOfPartition(let e) = event { ended.insert(e.partition) }
            if ended.count == 2 { break }
        }
        try await reader.close()
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        for p in Int32(0)..<2 {
            let end = try await admin.watermarks(TopicPartition("prices.raw", p)).high
            #expect(last[p] == end, "the last checkpoint of prices.raw[\(p)] covers \(last[p] ?? -1) of its \(end) inputs: an older state landed after the new owner's")
        }
        await admin.close()
    }

    /// The last changelog record of a partition is always its newest state: a checkpoint whose
    /// delivery failed is retried before any later one is written. Here a new-products stage
    /// holds one product in its window when its first checkpoint is refused (NOT_ENOUGH_REPLICAS,
    /// once; the producer makes no retries of its own, so the failure is reported at once) and
    /// waits 10 s for the worker's retry. Meanwhile the window closes on the timer (the
    /// notification goes out, the state changes), so a newer checkpoint is due while the first
    /// still waits. The changelog must end with the newer one, whose window is empty.
    @Test func aRetriedCheckpointNeverLandsAfterANewerOne() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["products.raw", "notifications", "products.changelog", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: t == "products.changelog" ? 2 : 1)
        }
        mock.setCoordinator("group", key: "new-products", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send(ProducerRecord(topic: "products.raw", key: Array("2012".utf8), value: Array(StageServiceMockTests.product.utf8)))
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: products.raw}
              - {name: notifications}
              - {name: products.changelog, config: {cleanup.policy: compact}}
              - {name: dlq}
            stages:
              - name: new-products
                chain: [products.new-notifications]
                inputs: [products.raw]
                dead-letter-topic: dlq
                changelog: products.changelog
                checkpoint-interval: 500ms
                advance-interval: 50ms
                retry: {attempts: 5, initial-backoff: 10s, max-backoff: 10s}
                options: {new-products-interval: 6s}
            """)
        var settings = Self.settings(mock)
        settings.kafka.raw["enable.idempotence"] = "false"
        settings.kafka.raw["retries"] = "0"
        let service = try StageService(definition: try topology.stage(named: "new-products"), topology: topology, settings: settings.measured())
        let running = Task { try await service.run() }
        // Restored (an empty changelog) and processed; the first checkpoint is due 500 ms after the assignment.
        try await eventually("the product processed") { service.readings.processed == 1 }
        // Produce (API key 0): the next request, the first checkpoint's, is refused.
        mock.pushRequestErrors(apiKey: 0, errorCodes: [19])
        try await eventually("the first checkpoint failed") { service.readings.retries >= 1 }
        func windows(_ checkpoint: ConsumerRecord) -> String {
            let json = String(decoding: checkpoint.value ?? [], as: UTF8.self)
            return json.contains(#""windows":{}"#) ? "empty" : "holding"
        }
        try await eventually("a checkpoint after the window closed", within: .seconds(30)) {
            try await Self.read("products.changelog", from: mock).contains { windows($0) == "empty" }
        }
        service.requestStop()
        try await running.value
        let states = try await Self.read("products.changelog", from: mock).map(windows)
        #expect(states.last == "empty", "checkpoints in log order: \(states); the last one must be the newest state")
    }

    /// A restored partition starts where its state does, not at the group's commit: here the
    /// changelog's last record is an older state (covering 500 of 1,000 inputs, as a member that
    /// was stopped past its session would write when it comes back) while the group committed
    /// all 1,000. The next owner must read inputs 500 to 999 again, or they never reach the state.
    @Test func aRestoredPartitionStartsWhereItsStateDoes() async throws {
        let (mock, inputs) = try await Self.cluster(onBroker2: [], inputs: 1_000)
        let topology = try Topology.parse(Self.candlesTopology)
        let first = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: Self.settings(mock).measured())
        let running = Task { try await first.run() }
        try await eventually("every input settled") { first.readings.inputsSettled == 1_000 }
        first.requestStop()
        try await running.value
        // An older checkpoint lands last: the state after inputs 0..<500.
        var runner = try TransformCatalog().runner(for: ["prices.candles"])
        for (i, (record, _)) in inputs.prefix(500).enumerated() {
            let input = InputRecord(key: record.key, value: record.value, timestamp: record.timestamp ?? 0, origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: Int64(i)))
            _ = runner.process(input, context: TransformContext(now: input.timestamp))
        }
        let changelog = Changelog(topic: "prices.changelog", partitions: 1, stage: "candles")
        let older = try changelog.record(state: runner.state, offsets: [TopicPartitionOffset("prices.raw", 0, offset: 500)], for: TopicPartition("prices.raw", 0))
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        #expect(try await producer.send(older).error == nil)
        await producer.close()

        let second = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: Self.settings(mock).measured())
        let again = Task { try await second.run() }
        try await eventually("the inputs after the restored state read again") { second.readings.processed >= 500 }
        second.requestStop()
        try await again.value
        #expect(second.readings.restoredPartitions == 1)
        #expect(second.readings.processed == 500, "inputs 500..<1000, once each")
        #expect(try await Self.read("prices.changelog", from: mock).last.flatMap(Self.coveredOffset) == 1_000, "and the state covers them again")
    }

    /// Exactly once, a partition's state is restored to cover the group's committed offsets: a
    /// checkpoint and the offsets commit in one transaction, and a changelog read to its last
    /// stable offset can end before the newest committed checkpoint (a transaction a killed
    /// predecessor left open freezes that offset). Here the group's commit is at 1,000 while the
    /// changelog holds only a checkpoint covering 500; the checkpoint covering 1,000 shows up two
    /// seconds after the worker starts. The worker must restore that one and redo nothing: with
    /// the older state it would process (and commit) inputs 500 to 999 a second time.
    @Test func exactlyOnceRestoresTheStateThatCoversTheCommittedOffsets() async throws {
        let (mock, inputs) = try await Self.cluster(onBroker2: [], inputs: 1_000)
        let changelog = Changelog(topic: "prices.changelog", partitions: 1, stage: "candles")
        func checkpoint(after count: Int) throws -> ProducerRecord {
            var runner = try TransformCatalog().runner(for: ["prices.candles"])
            for (i, (record, _)) in inputs.prefix(count).enumerated() {
                let input = InputRecord(key: record.key, value: record.value, timestamp: record.timestamp ?? 0, origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: Int64(i)))
                _ = runner.process(input, context: TransformContext(now: input.timestamp))
            }
            return try changelog.record(state: runner.state, offsets: [TopicPartitionOffset("prices.raw", 0, offset: Int64(count))], for: TopicPartition("prices.raw", 0))
        }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        #expect(try await producer.send(try checkpoint(after: 500)).error == nil)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        try await admin.alterCommittedOffsets(group: "candles", offsets: [TopicPartitionOffset("prices.raw", 0, offset: 1_000)])

        let topology = try Topology.parse(Self.candlesTopology + "\n    delivery: exactly-once")
        var settings = Self.settings(mock)
        settings.transactionTimeout = .seconds(20)
        let service = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settings.measured())
        let running = Task { try await service.run() }
        await admin.close()
        // The newer checkpoint becomes visible only after the worker has had its partition for
        // a while (as when an open transaction ends): a worker that restores the older one does
        // so as soon as it joins (about 3 s on the mock; watched for 8 s), one that waits for a
        // covering checkpoint restores nothing meanwhile.
        try? await eventually("a restore of the older checkpoint", within: .seconds(8)) { service.readings.restoredPartitions == 1 }
        #expect(try await producer.send(try checkpoint(after: 1_000)).error == nil)
        await producer.close()
        try await eventually("the partition restored", within: .seconds(30)) { service.readings.restoredPartitions == 1 }
        _ = try await Self.produce(1_000..<1_010, to: mock)
        try await eventually("the new inputs processed") { service.readings.processed >= 10 }
        service.requestStop()
        try await running.value
        #expect(service.readings.processed == 10, "only the inputs after the committed offset: \(service.readings.processed) processed")
    }

    /// A record too large for `message.max.bytes` can never be delivered. A checkpoint or a dead
    /// letter that fails so stops the worker with the reason (retrying it would block the
    /// partition and its revocation for good); nothing after it is committed.
    @Test(arguments: ["checkpoint", "dead letter"]) func aRecordThatCanNeverBeDeliveredStopsTheWorkerWithTheReason(_ what: String) async throws {
        let (mock, _) = try await Self.cluster(onBroker2: [], inputs: what == "checkpoint" ? 600 : 0)
        if what == "dead letter" {
            // Garbage of 900 bytes: the dead letter's headers take it past 1,000.
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
            _ = try await producer.send(ProducerRecord(topic: "prices.raw", value: Array(repeating: UInt8(ascii: "x"), count: 900)))
            await producer.close()
        }
        let topology = try Topology.parse(Self.candlesTopology)
        var settings = Self.settings(mock)
        settings.kafka.raw["message.max.bytes"] = "1000"
        let service = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settings.measured())
        let message = try #require(await Self.stopped(service, within: .seconds(60)), "the worker stopped within 60 s")
        #expect(message.contains(what) && message.contains("message.max.bytes"), "\(message)")
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let committed = try await admin.committedOffsets(group: "candles", partitions: [TopicPartition("prices.raw", 0)])
        await admin.close()
        #expect(committed.allSatisfy { $0.offset <= 0 }, "nothing committed past what could not be delivered: \(committed)")
    }

    /// The shutdown deadline holds for every stop, not only a signal's: here `--stop-after` stops
    /// a worker whose outputs cannot be delivered (their leader is down), and it must give up
    /// within its deadline instead of waiting for the broker. The lane's settlement task is a
    /// child of `run()`'s task group, so `run()` returns only once that task, cancelled at the
    /// deadline, stops waiting for the delivery reports that do not come.
    @Test func aStopAfterTheInputLimitKeepsTheShutdownDeadline() async throws {
        let (mock, _) = try await Self.cluster(onBroker2: ["prices.candles"], inputs: 3_000)
        mock.setBrokerDown(2)
        let topology = try Topology.parse(Self.candlesTopology)
        var settings = Self.settings(mock)
        settings.stopAfterInputs = 3_000
        settings.shutdownDeadline = .seconds(2)
        let service = try StageService(definition: try topology.stage(named: "candles"), topology: topology, settings: settings.measured())
        let clock = ContinuousClock()
        let start = clock.now
        let outcome = await Self.stopped(service, within: .seconds(30))
        #expect(outcome != nil, "run() ended within 30 s")
        #expect(outcome?.contains("shutdown") == true, "it says the shutdown overran: \(outcome ?? "")")
        // And which step it was in: the outputs in flight do not settle.
        #expect(outcome?.contains("stuck settling what was in flight") == true, "\(outcome ?? "")")
        #expect(clock.now - start < .seconds(20))
    }

    /// librdkafka's consumer close can wait for ever on a coordinator that does not answer
    /// (confluentinc/librdkafka#3740): here the coordinator's broker goes down once every input
    /// is settled. The ticks' commits, which wait on it, do not hold the loop or the stop. The
    /// close gets the deadline but the producer's share; the worker then closes its producer and
    /// stops within its deadline without an error (what the close did not commit is read again by
    /// the next owner).
    @Test func aCoordinatorThatNeverAnswersTheCloseStillLetsTheWorkerStopInTime() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["in", "out", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: 1)
        }
        mock.setCoordinator("group", key: "relay", brokerID: 2)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "in", partition: 0, key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try StageServiceMockTests.relay(partitions: 1)
        var settings = Self.settings(mock)
        // librdkafka stops waiting for the coordinator after the session timeout: longer than
        // the shutdown deadline here, as a stuck close would be.
        settings.sessionTimeout = .seconds(45)
        settings.shutdownDeadline = .seconds(20)
        let service = try StageService(definition: try topology.stage(named: "relay"), topology: topology, settings: settings.measured())
        let outcome = Task { await Self.stopped(service, within: .seconds(60)) }
        try await eventually("every input settled") { service.readings.inputsSettled == 20 }
        mock.setBrokerDown(2)
        let clock = ContinuousClock()
        // The ticks' commits now wait on a coordinator that does not answer: they must not hold
        // the loop (one did, for the 45 s session timeout, in a CI run, and the stop with it).
        let down = clock.now
        try await eventually("the loop turns 2 s after the coordinator went down", within: .seconds(8)) {
            clock.now - service.health.snapshot().loopAge > down + .seconds(2)
        }
        let stopped = clock.now
        service.requestStop()
        let message = await outcome.value
        #expect(message == "returned without an error", "\(message ?? "still running after 60 s")")
        // The close is given up at 15 s, leaving the producer its 5 s: done well before the 20 s
        // deadline. (Before, the close had all of it and ended with the deadline, in a race
        // with the overrun: local chaos saw "stuck closing the producer".)
        #expect(clock.now - stopped < .seconds(18), "the producer's share was left: \(clock.now - stopped)")
    }

    /// Deliveries that fail and are retried are counted in the metrics once each, whichever
    /// attempt delivered them: records-out counts every output delivered, not only the last
    /// attempt's. Here the outputs go to two partitions led by two brokers; one broker is down
    /// for a while, so a batch's outputs to the other are delivered at the first attempt and the
    /// rest later.
    @Test func metricsCountEveryDeliveryOfARetriedBatch() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        try mock.createTopic("in", partitions: 1)
        try mock.createTopic("out", partitions: 2)
        try mock.createTopic("dlq", partitions: 1)
        mock.setPartitionLeader("in", partition: 0, brokerID: 1)
        mock.setPartitionLeader("dlq", partition: 0, brokerID: 1)
        mock.setPartitionLeader("out", partition: 0, brokerID: 1)
        mock.setPartitionLeader("out", partition: 1, brokerID: 2)
        mock.setCoordinator("group", key: "relay", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<200).map { ProducerRecord(topic: "in", key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out, partitions: 2}
              - {name: dlq}
            stages:
              - name: relay
                chain: [pass-through]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                retry: {attempts: 1000, initial-backoff: 50ms, max-backoff: 100ms}
            """)
        let metrics = TestMetrics()
        var settings = Self.settings(mock)
        settings.metricsFactory = metrics
        settings.messageTimeout = .milliseconds(300)
        mock.setBrokerDown(2)
        let service = try StageService(definition: try topology.stage(named: "relay"), topology: topology, settings: settings)
        let running = Task { try await service.run() }
        try await eventually("a retry") { service.readings.retries >= 1 }
        mock.setBrokerUp(2)
        try await eventually("every input settled") { service.readings.inputsSettled == 200 }
        service.requestStop()
        try await running.value
        #expect(service.readings.produced == 200)
        let out = metrics.counterTotal(label: MetricName.recordsOut, dimensions: [("stage", "relay"), ("topic", "out")])
        #expect(out == 200, "pipeline_records_out_total counts every delivered output once: \(out)")
        #expect(metrics.counterTotal(label: MetricName.recordsIn, dimensions: [("stage", "relay")]) == 200)
    }

    /// A stand-in for the thumbnail worker: an I/O stage that relays each record after a yield.
    struct RelayIO: ConcurrentTransform {
        var name: String { "thumbnails.render" }
        func process(_ record: InputRecord) async -> TransformOutput {
            await Task.yield()
            return TransformOutput(records: [OutputRecord(output: "out", key: record.key, value: record.value.map(Array.init), dedupeKey: "relay:\(record.origin.offset)")])
        }
    }

    /// Exactly-once with a concurrent (I/O) stage: input offsets are committed only with a
    /// transaction, never stored for the consumer to commit. Here every transaction fails to
    /// commit (as a broker refusal would), so the worker stops after its attempts, and the
    /// group must have no committed offset.
    @Test func exactlyOnceWithAConcurrentStageCommitsOffsetsOnlyInTransactions() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        for t in ["in", "out", "dlq"] { try mock.createTopic(t, partitions: 1) }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<50).map { ProducerRecord(topic: "in", key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: io
                chain: [thumbnails.render]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                delivery: exactly-once
                commit-interval: 20ms
                retry: {attempts: 3, initial-backoff: 20ms, max-backoff: 50ms}
            """)
        var settings = Self.settings(mock)
        settings.transactionFault = { KafkaError(code: .broker, message: "injected: the coordinator refused the offsets") }
        let service = try StageService(
            definition: try topology.stage(named: "io"), topology: topology, settings: settings.measured(), concurrent: RelayIO())
        await #expect(throws: KafkaError.self) { try await service.run() }
        #expect(service.readings.transactionsAborted >= 3)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let committed = try await admin.committedOffsets(group: "io", partitions: [TopicPartition("in", 0)])
        await admin.close()
        #expect(committed.allSatisfy { $0.offset < 0 }, "no transaction committed, so no offset may be: \(committed)")
    }

    /// An I/O stage whose record `k3` never finishes (a source that trickles forever).
    struct HangingIO: ConcurrentTransform {
        var name: String { "thumbnails.render" }
        func process(_ record: InputRecord) async -> TransformOutput {
            if record.key == Array("k3".utf8) { try? await Task.sleep(for: .seconds(3_600)) }
            return TransformOutput(records: [OutputRecord(output: "out", key: record.key, value: record.value.map(Array.init), dedupeKey: "relay:\(record.origin.offset)")])
        }
    }

    /// Exactly once, a record the stage does not finish within half the transaction timeout is
    /// dead-lettered (`timed-out`) so that the open transaction can commit: otherwise the broker
    /// aborts it, the redo repeats the same slow work, and the partition never moves.
    @Test func exactlyOnceDeadLettersARecordSlowerThanTheTransactionAllows() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        for t in ["in", "out", "dlq"] { try mock.createTopic(t, partitions: 1) }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "in", key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: io
                chain: [thumbnails.render]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                delivery: exactly-once
                commit-interval: 20ms
            """)
        var settings = Self.settings(mock)
        settings.transactionTimeout = .seconds(4)
        let service = try StageService(definition: try topology.stage(named: "io"), topology: topology, settings: settings.measured(), concurrent: HangingIO())
        let running = Task { try await service.run() }
        try await eventually("every input settled", within: .seconds(30)) { service.readings.inputsSettled == 20 }
        service.requestStop()
        try await running.value
        let letters = try await Self.read("dlq", from: mock).compactMap(DeadLetterEntry.init)
        #expect(letters.map(\.letter.failure.reason) == [.timedOut])
        #expect(letters.first?.letter.key == Array("k3".utf8))
        #expect(try await Self.read("out", from: mock).count == 19)
    }

    /// Exactly once, an output the broker refuses for good (TOPIC_AUTHORIZATION_FAILED, as after
    /// an ACL change) dooms its transaction; the redo must dead-letter that output as itself
    /// (naming where it was going) instead of producing it again, so that the transaction
    /// commits and the partition moves on. Without that, every redo makes the same output, the
    /// worker stops after the retry policy's aborts in a row, and a restart does it all again.
    @Test func exactlyOnceDeadLettersAnOutputThatCanNeverBeDelivered() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["in", "out", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: t == "out" ? 2 : 1)
        }
        mock.setCoordinator("group", key: "io", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "in", key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: io
                chain: [pass-through]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                delivery: exactly-once
                commit-interval: 20ms
                retry: {attempts: 3, initial-backoff: 20ms, max-backoff: 50ms}
            """)
        // Produce (API key 0) to the output topic's broker: refused, every time.
        mock.pushRequestErrors(brokerID: 2, apiKey: 0, errorCodes: Array(repeating: 29, count: 1_000))
        let service = try StageService(definition: try topology.stage(named: "io"), topology: topology, settings: Self.settings(mock).measured())
        let running = Task { try await service.run() }
        // (The mock cluster does not show offsets committed in transactions to the group.)
        try await eventually("every output dead-lettered in a committed transaction, or the worker stopped", within: .seconds(60)) {
            (service.readings.deadLettered == 20 && service.readings.transactionsCommitted >= 1) || service.readings.transactionsAborted >= 3
        }
        service.requestStop()
        try await running.value
        #expect(service.readings.transactionsAborted == 1, "one abort for the refused outputs, then the redo commits")
        let letters = try await Self.read("dlq", from: mock).compactMap(DeadLetterEntry.init)
        #expect(letters.count == 20, "every refused output dead-lettered once: \(letters.count)")
        #expect(letters.allSatisfy { $0.letter.failure.reason == .deliveryFailed && $0.letter.destination?.topic == "out" })
        #expect(Set(letters.compactMap { $0.letter.value.map { String(decoding: $0, as: UTF8.self) } }) == Set((0..<20).map { "v\($0)" }))
    }

    /// An I/O stage that makes nothing of a record (no output, no dead letter).
    struct SilentIO: ConcurrentTransform {
        var name: String { "thumbnails.render" }
        func process(_ record: InputRecord) async -> TransformOutput { TransformOutput() }
    }

    /// A concurrent record that makes nothing still leaves the in-flight count when it settles:
    /// with a bound of 20 records in flight, 200 such records must all settle (a leak would stop
    /// the worker at the bound for good) and nothing stays counted in flight.
    @Test func aConcurrentRecordThatMakesNothingLeavesTheInFlightCount() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        for t in ["in", "out", "dlq"] { try mock.createTopic(t, partitions: 1) }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<200).map { ProducerRecord(topic: "in", key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: io
                chain: [thumbnails.render]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                max-in-flight-records: 20
            """)
        let service = try StageService(
            definition: try topology.stage(named: "io"), topology: topology, settings: Self.settings(mock).measured(), concurrent: SilentIO())
        let running = Task { try await service.run() }
        try await eventually("every input settled") { service.readings.inputsSettled == 200 }
        try await eventually("nothing counted in flight") { service.readings.inFlightRecords == 0 }
        service.requestStop()
        try await running.value
        #expect(service.readings.produced == 0 && service.readings.deadLettered == 0)
    }
}
