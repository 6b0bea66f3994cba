import Deadlines
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import Kafka
import Operations
import Pipeline
import PipelineTesting
import Workers

/// `pipelinectl worker` processes against librdkafka's mock cluster, which runs in this test
/// process and listens on loopback TCP: a broker taken down under the candle topic while the
/// worker is killed, and signals at the first moments of a worker's life.
@Suite(.serialized, .timeLimit(.minutes(4))) struct WorkerCrashTests {
    static let topologyYAML = """
        topics:
          - {name: prices.raw}
          - {name: prices.candles}
          - {name: prices-candles.changelog, config: {cleanup.policy: compact}}
          - {name: dead-letters}
        stages:
          - name: prices-candles
            chain: [prices.candles]
            inputs: [prices.raw]
            outputs: {prices.candles.1m: prices.candles}
            dead-letter-topic: dead-letters
            changelog: prices-candles.changelog
            checkpoint-interval: 100ms
        """

    /// Two mock brokers; every topic of partition 0 led by broker 1 except `prices.candles`, led by broker 2.
    static func cluster() throws -> KafkaMockCluster {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["prices.raw", "prices.candles", "prices-candles.changelog", "dead-letters"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: t == "prices.candles" ? 2 : 1)
        }
        mock.setCoordinator("group", key: "prices-candles", brokerID: 1)
        return mock
    }

    static func startWorker(_ topology: String, _ bootstrap: String) throws -> ManagedProcess.Handle {
        try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(),
            arguments: ["worker", "prices-candles", "--topology", topology, "--bootstrap-server", bootstrap, "--session-timeout", "6s",
                "--shutdown-deadline", "10s", "--metrics-address", "127.0.0.1:0", "--statistics-interval", "1s"],
            environment: [:])
    }

    /// The value of a counter in a worker's /metrics (0 when absent).
    static func metric(_ name: String, of worker: ManagedProcess.Handle) async throws -> Double {
        try await worker.waitForLine(containing: "metrics and health endpoint listening", timeout: .seconds(30))
        let line = worker.output().split(separator: "\n").last { $0.contains("metrics and health endpoint listening") } ?? ""
        guard let range = line.range(of: #"port=(\d+)"#, options: .regularExpression), let port = Int(line[range].dropFirst(5)) else { return 0 }
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!)
        return String(decoding: data, as: UTF8.self).split(separator: "\n")
            .filter { $0.hasPrefix(name) }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
            .reduce(0, +)
    }

    static func read(_ topic: String, _ bootstrap: String) async throws -> [ConsumerRecord] {
        var records: [ConsumerRecord] = []
        try await TopicReader(kafka: KafkaConfiguration(bootstrapServers: [bootstrap]))
            .read(from: [TopicPartitionOffset(topic, 0, offset: TopicPartitionOffset.beginning)]) { batch in
                records += batch
                return true
            }
        return records
    }

    /// The issue's reproduction, from outside: the candle topic's leader is down while a worker
    /// consumes 3,000 ticks (its changelog's leader is up), the worker is killed with SIGKILL,
    /// the broker comes back and a new worker takes over. Every candle must arrive: a
    /// checkpoint written while its candles were undelivered would make the new worker skip them.
    @Test func killedWhileItsOutputsAreStuckTheWorkerLosesNothing() async throws {
        let mock = try Self.cluster()
        let bootstrap = mock.bootstrapServers
        let path = try WorkerProcessTests.writeTopology(Self.topologyYAML)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        let records = (0..<3_000).map { PriceTicks.tick($0) }
        let reports = try await producer.send(records)
        await producer.close()
        let inputs = Array(zip(records, reports)).map { (record: $0.0, report: $0.1) }
        let reference = try PriceTicks.reference(inputs: inputs, stages: ["prices.candles"])
        #expect(reference.count > 50)

        mock.setBrokerDown(2)
        let first = try Self.startWorker(path, bootstrap)
        defer { first.kill() }
        try await eventually("every tick processed", within: .seconds(60)) { try await Self.metric("pipeline_records_in_total", of: first) >= 3_000 }
        // Where the defect was, a checkpoint covering every tick is written within a checkpoint
        // interval; give it twenty, then kill.
        try? await eventually("a checkpoint of every tick", within: .seconds(2)) {
            try await Self.read("prices-candles.changelog", bootstrap).contains {
                $0.header("checkpoint.offsets").map { String(decoding: $0, as: UTF8.self) }?.hasSuffix("=3000") == true
            }
        }
        first.kill()
        #expect(await first.waitForExit() == SIGKILL)
        mock.setBrokerUp(2)

        let second = try Self.startWorker(path, bootstrap)
        defer { second.kill() }
        var candles: [ConsumerRecord] = []
        do {
            try await eventually("every candle delivered", within: .seconds(60)) {
                candles = try await Self.read("prices.candles", bootstrap)
                let keys = Set(candles.compactMap { $0.header(OutputRecord.dedupeKeyHeader) }.map { String(decoding: $0, as: UTF8.self) })
                return reference.keys.allSatisfy(keys.contains)
            }
        } catch {
            print("second worker:\n\(second.recentOutput(lines: 40))")
        }
        second.terminate()
        #expect(await second.waitForExit() == 0)
        let report = WorkerProcessTests.check(candles, against: reference)
        print("checker: \(report)")
        #expect(report.lost.isEmpty, "lost candles: \(report)")
        #expect(report.wrong.isEmpty, "\(report)")
    }

    /// A topic declared `dedupe-key: content` (prices.ticks in the shipped topology), with the
    /// repeats forced: once the worker has made the first 100 ticks, the broker refuses every
    /// offset commit, so the worker delivers the others but commits none of them before it is
    /// killed, and the second worker makes them again. Each tick then arrives twice or more, never with a
    /// `dedupe-key` header, every copy with the content key of the tick one uninterrupted run
    /// makes: a consumer that keeps one record per content key has each tick once.
    @Test func repeatsOnATopicIdentifiedByContentShareTheirContentKeys() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["prices.raw", "prices.ticks", "dead-letters"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: 1)
        }
        mock.setCoordinator("group", key: "prices-decode", brokerID: 2)
        let path = try WorkerProcessTests.writeTopology("""
            topics:
              - {name: prices.raw}
              - {name: prices.ticks, dedupe-key: content}
              - {name: dead-letters}
            stages:
              - name: prices-decode
                chain: [prices.decode]
                inputs: [prices.raw]
                dead-letter-topic: dead-letters
            """)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let bootstrap = mock.bootstrapServers
        func worker() throws -> ManagedProcess.Handle {
            try ManagedProcess.launch(
                try WorkerProcessTests.pipelinectl(),
                arguments: ["worker", "prices-decode", "--topology", path, "--bootstrap-server", bootstrap, "--session-timeout", "10s",
                    "--shutdown-deadline", "10s", "--metrics-address", "127.0.0.1:0"],
                environment: [:])
        }
        let count = 2_000
        let records = (0..<count).map { PriceTicks.tick($0) }
        let reference = PriceTicks.decodedContentKeys(records)
        let expected = Set(reference)
        #expect(expected.count == count)

        let first = try worker()
        defer { first.kill() }
        try await first.waitForLine(containing: "partitions assigned", timeout: .seconds(60))
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        // The first ticks go through as usual (the worker has read its committed offsets from
        // the coordinator and is fetching); then every commit fails (REQUEST_TIMED_OUT, until
        // cleared) and the rest come.
        let warmUp = 100
        #expect(try await producer.send(Array(records[..<warmUp])).allSatisfy { $0.error == nil })
        try await eventually("the first ticks delivered", within: .seconds(30)) { try await Self.read("prices.ticks", bootstrap).count >= warmUp }
        mock.pushRequestErrors(apiKey: 8, errorCodes: Array(repeating: 7, count: 100_000))
        #expect(try await producer.send(Array(records[warmUp...])).allSatisfy { $0.error == nil })
        await producer.close()
        try await eventually("every tick delivered once", within: .seconds(30)) { try await Self.read("prices.ticks", bootstrap).count >= count }
        first.kill()
        #expect(await first.waitForExit() == SIGKILL)
        mock.clearRequestErrors(apiKey: 8)

        let second = try worker()
        defer { second.kill() }
        var ticks: [ConsumerRecord] = []
        do {
            try await eventually("the uncommitted ticks made again", within: .seconds(60)) {
                ticks = try await Self.read("prices.ticks", bootstrap)
                return ticks.count >= 2 * count - warmUp
            }
        } catch {
            Issue.record("\(ticks.count) ticks of \(2 * count - warmUp); second worker:\n\(second.recentOutput(lines: 30))")
        }
        second.terminate()
        #expect(await second.waitForExit() == 0, "\(second.recentOutput())")
        ticks = try await Self.read("prices.ticks", bootstrap)
        let keys = ticks.map(PriceTicks.contentKey)
        print("content topic with forced repeats: \(ticks.count) ticks, \(Set(keys).count) distinct")
        #expect(ticks.allSatisfy { $0.header(OutputRecord.dedupeKeyHeader) == nil }, "no dedupe-key header on a content topic")
        #expect(Set(keys) == expected)
        // Each tick after the first ones twice or more (the first worker committed none of
        // them), every copy under its tick's key.
        let copies = Dictionary(grouping: keys, by: { $0 }).mapValues(\.count)
        let late = reference[warmUp...]
        #expect(late.allSatisfy { (copies[$0] ?? 0) >= 2 }, "\(late.filter { (copies[$0] ?? 0) < 2 }.count) of the uncommitted ticks were not repeated")
    }

    /// Whether the process has SIGTERM ignored or caught (its handlers are installed), from /proc.
    static func handlesSIGTERM(_ pid: pid_t) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
        let bit: UInt64 = 1 << (UInt64(SIGTERM) - 1)
        for line in status.split(separator: "\n") where line.hasPrefix("SigIgn:") || line.hasPrefix("SigCgt:") {
            if let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16), mask & bit != 0 { return true }
        }
        return false
    }

    /// A SIGTERM at any moment of a worker's start stops it gracefully (exit 0): once its
    /// handlers are installed (the first thing it does), a signal that comes before the
    /// worker's services run is kept and honoured when they start. The signal is sent as soon
    /// as /proc shows SIGTERM handled, and at a few moments after that.
    @Test(arguments: [0, 20, 100, 400]) func aSIGTERMAtStartStopsTheWorkerGracefully(afterMilliseconds delay: Int) async throws {
        let mock = try Self.cluster()
        let path = try WorkerProcessTests.writeTopology(Self.topologyYAML)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let clock = ContinuousClock()
        let spawned = clock.now
        let worker = try Self.startWorker(path, mock.bootstrapServers)
        defer { worker.kill() }
        try await eventually("SIGTERM handled", within: .seconds(10)) { Self.handlesSIGTERM(worker.pid) || !worker.isRunning }
        let handled = clock.now - spawned
        if delay > 0 { try await Task.sleep(for: .milliseconds(delay)) }
        worker.terminate()
        let exited = await Deadline.race(.seconds(30)) { await worker.waitForExit() }
        #expect(exited == 0, "exit status \(exited.map(String.init) ?? "none within 30 s"), handlers installed \(handled) after spawn:\n\(worker.recentOutput(lines: 20))")
    }
}
