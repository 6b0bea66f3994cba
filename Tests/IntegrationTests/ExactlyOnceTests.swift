import Foundation
import Synchronization
import Testing
@testable import Pipeline
import PipelineTesting
import Workers
@testable import Kafka
@testable import Operations

/// `delivery: exactly-once`: consume-transform-produce in Kafka transactions, checked with the
/// worker-process tests' checker (lost, wrong, duplicated, out of order). Exactly-once is
/// checked on the local broker, which hides aborted records from `read_committed` readers;
/// broker-side refusals (a zombie's generation, a fenced producer) on librdkafka's mock cluster.
@Suite(.serialized, .timeLimit(.minutes(5))) struct ExactlyOnceTests {
    /// The worker-process tests' topology, its candle stage made exactly-once.
    static func yaml(extra: String = "") -> String {
        WorkerProcessTests.topologyYAML.replacingOccurrences(
            of: "    checkpoint-interval: 200ms\n",
            with: "    checkpoint-interval: 200ms\n    delivery: exactly-once\n    commit-interval: 50ms\n" + extra)
    }

    static func topology() throws -> Topology {
        try Topology.parse(Self.yaml(extra: """
                advance-interval: 100ms
                retry: {attempts: 10, initial-backoff: 20ms, max-backoff: 100ms}

            """))
    }

    static func settings(_ bootstrap: String) -> WorkerSettings {
        var settings = WorkerSettings(bootstrapServers: [bootstrap])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.transactionTimeout = .seconds(30)
        return settings
    }


    /// Feeds three waves of ticks (5 % garbage) to an exactly-once candle worker; before each
    /// wave `arm` makes the next transaction that carries offsets fail; each wave waits for its
    /// abort. Returns the inputs with their offsets.
    static func runAborting(
        _ service: StageService, bootstrap: String, arm: () -> Void
    ) async throws -> (inputs: [(record: ProducerRecord, report: DeliveryReport)], garbage: Int) {
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        var inputs: [(record: ProducerRecord, report: DeliveryReport)] = []
        var garbage = 0
        let waves = 3, perWave = 3_000
        for wave in 0..<waves {
            arm()
            var records: [ProducerRecord] = []
            for i in (wave * perWave)..<((wave + 1) * perWave) {
                if i % 20 == 7 {
                    garbage += 1
                    records.append(ProducerRecord(topic: "prices.raw", key: Array("bad".utf8), value: Array("{\"code\": broken \(i)".utf8)))
                } else {
                    records.append(PriceTicks.tick(i))
                }
            }
            let reports = try await producer.send(records)
            for (r, report) in zip(records, reports) {
                #expect(report.error == nil)
                inputs.append((r, report))
            }
            try await eventually("abort \(wave + 1)", within: .seconds(60)) { service.readings.transactionsAborted >= wave + 1 }
        }
        await producer.close()
        return (inputs, garbage)
    }

    /// The checker. Neither tansu nor the mock hides aborted records from `read_committed`
    /// readers (measured: an aborted transaction of 1,000 records is read back whole), so the
    /// reader sees aborted copies; the worker counts what it wrote in aborted transactions, and
    /// every copy beyond the first must be one of those: no candle or dead letter lost, none
    /// wrong, none duplicated by committed transactions. Reads past the expected count.
    static func checkExactlyOnce(
        _ service: StageService, inputs: [(record: ProducerRecord, report: DeliveryReport)], garbage: Int, topology: Topology, bootstrap: String
    ) async throws {
        let reference = try PriceTicks.reference(
            inputs: inputs, stages: ["prices.candles"], options: try topology.stage(named: "prices-candles").options)
        let aborted = service.readings.abortedOutputs
        let outputs = try await WorkerProcessTests.readAll("prices.candles", partitions: 4, bootstrap: bootstrap) { outputs in
            outputs.count >= reference.count + aborted
        }
        let report = WorkerProcessTests.check(outputs, against: reference)
        #expect(report.lost.isEmpty && report.wrong.isEmpty && report.unexpected.isEmpty, "\(report)")
        #expect(aborted > 0, "the aborted transactions held candles (the check is not vacuous)")
        #expect(report.duplicates == aborted, "every extra copy was written in an aborted transaction: \(report), aborted outputs \(aborted)")
        let abortedLetters = service.readings.abortedDeadLetters
        let letters = try await WorkerProcessTests.readAll("dead-letters", partitions: 1, bootstrap: bootstrap) { $0.count >= garbage + abortedLetters }
        let origins = letters.map { letter in
            [DeadLetterHeader.originPartition, DeadLetterHeader.originOffset].map { letter.header($0).map { String(decoding: $0, as: UTF8.self) } ?? "?" }
                .joined(separator: "@")
        }
        #expect(Set(origins).count == garbage, "every bad input dead-lettered")
        #expect(letters.count == garbage + abortedLetters, "each once, but for aborted copies (\(letters.count) for \(garbage) + \(abortedLetters))")
        #expect(service.readings.transactionsAborted == 3, "one abort per refusal")
        #expect(service.readings.transactionsCommitted > 0)
    }

    /// Waits until the group's committed offsets cover every input.
    static func awaitCommitted(_ count: Int, bootstrap: String) async throws {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        try await eventually("offsets committed to the end", within: .seconds(30)) {
            let offsets = (try? await admin.committedOffsets(group: "prices-candles", partitions: (0..<4).map { TopicPartition("prices.raw", $0) })) ?? []
            return offsets.reduce(0) { $0 + max(0, $1.offset) } == Int64(count)
        }
        await admin.close()
    }

    /// On the local broker: three transactions fail to commit while input flows (injected at the
    /// commit, as a broker refusal would be). Each is aborted, undone (state, offsets) and its
    /// inputs processed again; the group's offsets move only with committed transactions.
    @Test func abortedTransactionsAreRedoneWithoutLossOrDuplicates() async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let topology = try Self.topology()
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            for t in topology.topics { try await admin.createTopic(TopicSpec(name: t.name, partitions: t.partitions, config: t.config)) }
            await admin.close()
            let armed = Mutex(0)
            var settings = Self.settings(bootstrap)
            settings.transactionFault = {
                armed.withLock { n in
                    guard n > 0 else { return nil }
                    n -= 1
                    return KafkaError(code: .broker, message: "injected: the coordinator refused the offsets", rdKafkaCode: 22)
                }
            }
            let service = try StageService(definition: try topology.stage(named: "prices-candles"), topology: topology, settings: settings.measured())
            let running = Task { try await service.run() }
            let (inputs, garbage) = try await Self.runAborting(service, bootstrap: bootstrap) { armed.withLock { $0 += 1 } }

            try await Self.checkExactlyOnce(service, inputs: inputs, garbage: garbage, topology: topology, bootstrap: bootstrap)
            try await Self.awaitCommitted(inputs.count, bootstrap: bootstrap)
            service.requestStop()
            try await running.value
        }
    }

    /// What Kafka answers a zombie (a worker whose partitions were given to another member)
    /// sending its transaction's offsets: ILLEGAL_GENERATION, which librdkafka makes abortable
    /// (KIP-447). Neither tansu nor the mock checks generations, so the mock answers it on
    /// request, three times while input flows: the worker aborts, undoes, redoes and goes on.
    /// (The mock keeps no offsets from TxnOffsetCommit, so committed offsets are checked on tansu.)
    @Test func aRefusedGenerationAbortsAndTheWorkerGoesOn() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        let topology = try Self.topology()
        for t in topology.topics { try mock.createTopic(t.name, partitions: t.partitions) }
        let bootstrap = mock.bootstrapServers
        let service = try StageService(definition: try topology.stage(named: "prices-candles"), topology: topology, settings: Self.settings(bootstrap).measured())
        let running = Task { try await service.run() }
        // TxnOffsetCommit (API key 28) answers ILLEGAL_GENERATION (22) once per wave.
        let (inputs, garbage) = try await Self.runAborting(service, bootstrap: bootstrap) { mock.pushRequestErrors(apiKey: 28, errorCodes: [22]) }
        try await Self.checkExactlyOnce(service, inputs: inputs, garbage: garbage, topology: topology, bootstrap: bootstrap)
        service.requestStop()
        try await running.value
    }

    /// Worker processes on the local broker in exactly-once mode while input flows: a second
    /// worker joins (the first commits its transaction before giving partitions up), then the
    /// first is stopped with SIGTERM (it commits and leaves; the second restores the state from
    /// the changelog, read committed). No transaction aborts on these paths, so even on tansu
    /// every candle and dead letter is there exactly once, and the offsets reach the end.
    @Test func workersHandOverWithoutDuplicates() async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let path = try WorkerProcessTests.writeTopology(Self.yaml())
            defer { try? FileManager.default.removeItem(atPath: path) }
            let topology = try Topology.load(path: path)
            #expect(try topology.stage(named: "prices-candles").delivery == .exactlyOnce)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            _ = try await topology.apply(using: admin)

            // 20,000 inputs (5 % garbage), sent at about 2,500 a second while the workers move.
            let count = 20_000
            let records = PriceTicks.ticksWithGarbage(count)
            let feeding = Task { () throws -> [DeliveryReport] in
                let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
                var reports: [DeliveryReport] = []
                for start in stride(from: 0, to: count, by: 250) {
                    reports += try await producer.send(Array(records[start..<start + 250]))
                    try await Task.sleep(for: .milliseconds(100))
                }
                await producer.close()
                return reports
            }
            var workers: [ManagedProcess.Handle] = []
            defer { for w in workers { w.kill() } }
            let first = try WorkerProcessTests.startWorker("prices-candles", topology: path, bootstrap: bootstrap, extra: ["--statistics-interval", "200ms"])
            workers.append(first)
            try await first.waitForLine(containing: "partitions assigned", timeout: .seconds(30))
            let second = try WorkerProcessTests.startWorker("prices-candles", topology: path, bootstrap: bootstrap, extra: ["--statistics-interval", "200ms"])
            workers.append(second)
            try await WorkerProcessTests.awaitSettledGroup([first, second], holding: 4)
            first.terminate()
            let status = await first.waitForExit()
            #expect(status == 0, "\(first.recentOutput())")
            let reports = try await feeding.value
            #expect(reports.allSatisfy { $0.error == nil })
            #expect(!first.output().contains("transaction aborted"), "\(first.recentOutput())")

            let inputs = Array(zip(records, reports))
            let reference = try PriceTicks.reference(
                inputs: inputs.map { (record: $0.0, report: $0.1) }, stages: ["prices.candles"], options: try topology.stage(named: "prices-candles").options)
            let garbage = (0..<count).filter { $0 % 20 == 7 }.count
            let candles = try await WorkerProcessTests.readAll("prices.candles", partitions: 4, bootstrap: bootstrap) { outputs in
                Set(outputs.compactMap { $0.header(OutputRecord.dedupeKeyHeader) }).count >= reference.count
            }
            let letters = try await WorkerProcessTests.readAll("dead-letters", partitions: 1, bootstrap: bootstrap) { $0.count >= garbage }
            try await Self.awaitCommitted(count, bootstrap: bootstrap)
            second.terminate()
            #expect(await second.waitForExit() == 0)
            #expect(!second.output().contains("transaction aborted"), "\(second.recentOutput())")
            let report = WorkerProcessTests.check(candles, against: reference)
            #expect(report.lost.isEmpty && report.wrong.isEmpty && report.unexpected.isEmpty && report.outOfOrder.isEmpty, "\(report)")
            #expect(report.duplicates == 0, "exactly once: \(report)")
            #expect(letters.count == garbage, "each bad input dead-lettered once")
        }
    }

    /// A transactional producer fenced by a newer one with the same id (INVALID_PRODUCER_EPOCH,
    /// which librdkafka makes fatal) must not go on: the worker stops with the error, and nothing
    /// of its open transaction becomes visible.
    @Test func aFencedWorkerStops() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        let topology = try Self.topology()
        for t in topology.topics { try mock.createTopic(t.name, partitions: t.partitions) }
        let bootstrap = mock.bootstrapServers
        // EndTxn (API key 26) answers INVALID_PRODUCER_EPOCH (47): the first commit is refused.
        mock.pushRequestErrors(apiKey: 26, errorCodes: [47])
        let service = try StageService(definition: try topology.stage(named: "prices-candles"), topology: topology, settings: Self.settings(bootstrap).measured())
        let running = Task { try await service.run() }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        _ = try await producer.send((0..<2_000).map { PriceTicks.tick($0) })
        await producer.close()
        await #expect(throws: KafkaError.self) { try await running.value }
        #expect(service.readings.processed > 0)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        let offsets = try await admin.committedOffsets(group: "prices-candles", partitions: (0..<4).map { TopicPartition("prices.raw", $0) })
        await admin.close()
        #expect(offsets.allSatisfy { $0.offset < 0 }, "nothing committed: \(offsets)")
    }
}
