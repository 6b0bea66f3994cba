import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Pipeline
import PipelineTesting
import Workers
import WorkersTesting
@testable import Kafka
@testable import Operations

/// `pipelinectl worker` processes on the real local broker, killed and stopped with real
/// signals while traffic flows, and a checker that compares every output with what a single
/// uninterrupted run computes.
@Suite(.serialized, .timeLimit(.minutes(5))) struct WorkerProcessTests {
    static let topologyYAML = """
        topics:
          - {name: prices.raw, partitions: 4}
          - {name: prices.candles, partitions: 4}
          - {name: prices.ticks, partitions: 4}
          - {name: prices-candles.changelog, partitions: 4, config: {cleanup.policy: compact}}
          - {name: dead-letters, partitions: 1}
        stages:
          - name: prices-candles
            chain: [prices.candles]
            inputs: [prices.raw]
            outputs: {prices.candles.1m: prices.candles}
            dead-letter-topic: dead-letters
            changelog: prices-candles.changelog
            checkpoint-interval: 200ms
            options: {candle-lateness: 5s}
          - name: prices-decode
            chain: [prices.decode]
            inputs: [prices.raw]
            dead-letter-topic: dead-letters
        """

    static func pipelinectl() throws -> String {
        if let path = ProcessInfo.processInfo.environment["PIPELINECTL"] { return path }
        let dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let path = dir.appendingPathComponent("pipelinectl").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw LocalBrokerError.notInstalled("pipelinectl not found at \(path): build it (swift build) or set PIPELINECTL")
        }
        return path
    }

    static func startWorker(_ stage: String, topology: String, bootstrap: String, extra: [String] = []) throws -> ManagedProcess.Handle {
        try ManagedProcess.launch(
            try pipelinectl(),
            arguments: ["worker", stage, "--topology", topology, "--bootstrap-server", bootstrap, "--session-timeout", "2s",
                "--shutdown-deadline", "15s", "--metrics-address", "127.0.0.1:0"] + extra,
            environment: [:])
    }

    /// Waits until every worker's `/readyz` says "ok" without "(joining)" twice in a row: all of
    /// them are in a steady group; with `holding`, they also hold that many partitions between
    /// them (a dead member's are reassigned: the broker has evicted it).
    static func awaitSettledGroup(
        _ workers: [ManagedProcess.Handle], holding partitions: Int? = nil, within limit: Duration = .seconds(60)
    ) async throws {
        var ports: [Int] = []
        for w in workers {
            try await w.waitForLine(containing: "metrics and health endpoint listening", timeout: .seconds(30))
            let line = w.output().split(separator: "\n").last { $0.contains("metrics and health endpoint listening") } ?? ""
            guard let range = line.range(of: #"port=(\d+)"#, options: .regularExpression), let port = Int(line[range].dropFirst(5)) else {
                throw LocalBrokerError.startFailed("no port in the worker's log line: \(line)")
            }
            ports.append(port)
        }
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        var settledChecks = 0
        var bodies: [String] = []
        while settledChecks < 2 {
            guard clock.now < deadline else {
                for (i, w) in workers.enumerated() { print("worker \(i + 1) output:\n\(w.recentOutput(lines: 40))") }
                throw LocalBrokerError.timedOut("the group did not settle within \(limit); /readyz: \(bodies)")
            }
            var all = true
            var held = 0
            bodies = []
            for port in ports {
                let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/readyz")!)
                let body = String(decoding: data, as: UTF8.self)
                bodies.append(body)
                if !body.hasPrefix("ok") || body.contains("joining") { all = false }
                if let range = body.range(of: #"\((\d+) partitions\)"#, options: .regularExpression) {
                    held += Int(body[range].dropFirst().prefix { $0.isNumber }) ?? 0
                }
            }
            if let partitions, held != partitions { all = false }
            settledChecks = all ? settledChecks + 1 : 0
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    static func writeTopology(_ yaml: String = topologyYAML) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("topology-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Reads partitions of a topic from the beginning, without a group, until every partition is
    /// at its end and `done` holds for what was read (so it also reads past the expected count).
    static func readAll(
        _ topic: String, partitions: Int, bootstrap: String, within limit: Duration = .seconds(150), config: ConsumerConfiguration? = nil,
        until done: ([ConsumerRecord]) -> Bool
    ) async throws -> [ConsumerRecord] {
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        var config = config ?? ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: "checker-\(UUID().uuidString)")
        config.reportEndOfPartition = true
        config.autoCommit = false
        let reader = try KafkaConsumer(configuration: config)
        try await reader.assign((0..<partitions).map { TopicPartitionOffset(topic, Int32($0), offset: TopicPartitionOffset.beginning) })
        var records: [ConsumerRecord] = []
        var atEnd = Set<Int32>()
        // Every wait is bounded: a reader at the end gets no further events, so a deadline checked
        // only on events would wait for ever for outputs that never come.
        while true {
            guard let event = try await TopicReader.next(reader, within: max(.zero, deadline - clock.now)) else {
                try await reader.close()
                throw LocalBrokerError.timedOut("\(topic): \(records.count) records read, still not complete after \(limit)")
            }
            switch event {
            case .records(let batch):
                records += batch
                for r in batch { atEnd.remove(r.partition) }
            case .endOfPartition(let end):
                atEnd.insert(end.partition)
                if atEnd.count == partitions, done(records) {
                    try await reader.close()
                    return records
                }
                if clock.now > deadline {
                    try await reader.close()
                    throw LocalBrokerError.timedOut("\(topic): \(records.count) records read, still not complete after \(limit)")
                }
            default: break
            }
        }
        try await reader.close()
        return records
    }

    /// Jepsen-style report over the outputs: lost, wrong, unexpected, duplicated, out of order.
    struct Report: CustomStringConvertible {
        var expected = 0
        var lost: [String] = []
        var wrong: [String] = []
        var unexpected: [String] = []
        var duplicates = 0
        var outOfOrder: [String] = []
        var description: String {
            "expected \(expected), lost \(lost.count) \(lost.prefix(3)), wrong \(wrong.count) \(wrong.prefix(3)), "
                + "unexpected \(unexpected.count) \(unexpected.prefix(3)), duplicates \(duplicates), out of order \(outOfOrder.count) \(outOfOrder.prefix(3))"
        }
    }

    static func check(_ outputs: [ConsumerRecord], against reference: [String: [UInt8]]) -> Report {
        var report = Report(expected: reference.count)
        var seen: [String: [UInt8]] = [:]
        var lastMinute: [String: String] = [:]  // by output partition and market
        for r in outputs.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            let key = r.header(OutputRecord.dedupeKeyHeader).map { String(decoding: $0, as: UTF8.self) } ?? "?"
            if let earlier = seen[key] {
                report.duplicates += 1
                if earlier != r.value { report.wrong.append(key) }
                continue
            }
            seen[key] = r.value ?? []
            guard let expected = reference[key] else { report.unexpected.append(key); continue }
            if expected != r.value { report.wrong.append(key) }
            // First occurrences of a market's candles come in minute order within an output partition.
            let recordKey = String(decoding: r.key ?? [], as: UTF8.self)
            let (market, minute) = (String(recordKey.split(separator: "|").first ?? ""), String(recordKey.split(separator: "|").last ?? ""))
            // (Within one output partition: a market's candles spread over partitions by key.)
            let slot = "\(r.partition)/\(market)"
            if let last = lastMinute[slot], last >= minute { report.outOfOrder.append(recordKey) }
            lastMinute[slot] = minute
        }
        report.lost = reference.keys.filter { seen[$0] == nil }.sorted()
        return report
    }

    @Test func garbageGoesToTheDeadLetterTopicAndSIGTERMLosesNothing() async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let path = try Self.writeTopology()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let topology = try Topology.load(path: path)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            _ = try await topology.apply(using: admin)

            // 20,000 records, every 20th one garbage (5 %).
            let count = 20_000
            let records = PriceTicks.ticksWithGarbage(count)
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            var reports: [DeliveryReport] = []
            for start in stride(from: 0, to: count, by: 2000) {
                reports += try await producer.send(Array(records[start..<start + 2000]))
            }
            await producer.close()
            #expect(reports.allSatisfy { $0.error == nil })

            // A worker is stopped with SIGTERM mid-stream; a second one finishes.
            let first = try Self.startWorker("prices-decode", topology: path, bootstrap: bootstrap)
            try await first.waitForLine(containing: "partitions assigned", timeout: .seconds(30))
            first.terminate()
            let clock = ContinuousClock()
            let start = clock.now
            let status = await first.waitForExit()
            #expect(status == 0, "\(first.recentOutput())")
            #expect(clock.now - start < .seconds(15), "exit within the shutdown deadline")
            #expect(first.recentOutput().contains("worker stopped"))
            let second = try Self.startWorker("prices-decode", topology: path, bootstrap: bootstrap)

            let garbage = Set((0..<count).filter { $0 % 20 == 7 })
            let dead = try await Self.readAll("dead-letters", partitions: 1, bootstrap: bootstrap) { $0.count >= garbage.count }
            let ticks = try await Self.readAll("prices.ticks", partitions: 4, bootstrap: bootstrap) { outputs in
                Set(outputs.compactMap { $0.header("input-id") }).count >= count - garbage.count
                    || outputs.count >= count - garbage.count
            }
            second.terminate()
            #expect(await second.waitForExit() == 0)

            // Every garbage record is in the dead-letter topic once per delivery, with its origin.
            var deadIDs = Set<Int>()
            for letter in dead {
                let id = Int(String(decoding: letter.header("input-id") ?? [], as: UTF8.self)) ?? -1
                deadIDs.insert(id)
                #expect(letter.value == records[id].value, "the original bytes")
                #expect(letter.header(DeadLetterHeader.stage) == Array("prices-decode".utf8), "the stage, as operators see it")
                #expect(letter.header(DeadLetterHeader.transform) == Array("prices.decode".utf8))
                #expect(letter.header(DeadLetterHeader.reason) != nil)
                #expect(letter.header(DeadLetterHeader.attempts) == Array("1".utf8))
                let origin = reports[id]
                #expect(letter.header(DeadLetterHeader.originPartition) == Array(String(origin.partition).utf8))
                #expect(letter.header(DeadLetterHeader.originOffset) == Array(String(origin.offset).utf8))
            }
            #expect(deadIDs == garbage, "every garbage record dead-lettered, nothing else")
            // Every good record decoded (the decoder keeps no input header, so count by dedupe key).
            let keys = Set(ticks.compactMap { $0.header(OutputRecord.dedupeKeyHeader) })
            #expect(keys.count == count - garbage.count, "good inputs processed: \(keys.count) of \(count - garbage.count)")
            let committed = try await admin.committedOffsets(group: "prices-decode", partitions: (0..<4).map { TopicPartition("prices.raw", $0) })
            await admin.close()
            let ends = Dictionary(grouping: reports, by: \.partition).mapValues { $0.map(\.offset).max()! + 1 }
            for c in committed { #expect(c.offset == ends[c.partition]) }
        }
    }

    /// prices.ticks declared `dedupe-key: content`, as the shipped topology declares it, on the
    /// real broker: a worker killed with SIGKILL once its outputs arrive and a second one that
    /// finishes. Every tick arrives without a `dedupe-key` header, and the content keys of what
    /// arrived are exactly those of what one uninterrupted run makes: nothing missing, and any
    /// repeat a byte-identical copy that a consumer drops by that key. (At this rate the first
    /// worker has often committed everything before the kill; WorkerCrashTests holds its commits
    /// back to force the repeats.)
    @Test func aTopicIdentifiedByContentSurvivesSIGKILLWithTheSameKeys() async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let yaml = Self.topologyYAML.replacingOccurrences(
                of: "{name: prices.ticks, partitions: 4}", with: "{name: prices.ticks, partitions: 4, dedupe-key: content}")
            let path = try Self.writeTopology(yaml)
            defer { try? FileManager.default.removeItem(atPath: path) }
            let topology = try Topology.load(path: path)
            #expect(topology.topic(named: "prices.ticks")?.dedupeKey == .content)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            _ = try await topology.apply(using: admin)
            await admin.close()

            let count = 20_000
            let records = (0..<count).map { PriceTicks.tick($0) }
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            for start in stride(from: 0, to: count, by: 4000) {
                let reports = try await producer.send(Array(records[start..<start + 4000]))
                #expect(reports.allSatisfy { $0.error == nil })
            }
            await producer.close()
            // One uninterrupted run, here: the keys a consumer derives from each output.
            let expected = Set(PriceTicks.decodedContentKeys(records))
            #expect(expected.count == count, "every tick is its own content")

            let first = try Self.startWorker("prices-decode", topology: path, bootstrap: bootstrap)
            defer { first.kill() }
            try await first.waitForLine(containing: "partitions assigned", timeout: .seconds(30))
            _ = try await Self.readAll("prices.ticks", partitions: 4, bootstrap: bootstrap) { $0.count >= 3000 }
            first.kill()
            #expect(await first.waitForExit() == SIGKILL)

            let second = try Self.startWorker("prices-decode", topology: path, bootstrap: bootstrap)
            defer { second.kill() }
            func keys(_ ticks: [ConsumerRecord]) -> Set<String> { Set(ticks.map(PriceTicks.contentKey)) }
            let ticks = try await Self.readAll("prices.ticks", partitions: 4, bootstrap: bootstrap) { keys($0).count >= count }
            second.terminate()
            #expect(await second.waitForExit() == 0, "\(second.recentOutput())")
            #expect(ticks.allSatisfy { $0.header(OutputRecord.dedupeKeyHeader) == nil }, "no dedupe-key header on a content topic")
            #expect(keys(ticks) == expected)
            print("content topic after SIGKILL: \(ticks.count) ticks, \(ticks.count - keys(ticks).count) repeats, \(keys(ticks).count) distinct")
        }
    }

    @Test func workersRecoverWhenTheBrokerIsKilledAndRestarted() async throws {
        var options = LocalBroker.Options(storage: .s3)
        options.startTimeout = .seconds(60)
        var broker = try await LocalBroker.start(options)
        // A step that throws must not leave the broker or the worker running (a CI run's did,
        // for an hour after the suite ended).
        defer { broker.kill() }
        let bootstrap = broker.bootstrapServers
        let path = try Self.writeTopology()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let topology = try Topology.load(path: path)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        _ = try await topology.apply(using: admin)
        await admin.close()

        func produce(_ range: Range<Int>) async throws -> [DeliveryReport] {
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            let reports = try await producer.send(range.map { PriceTicks.tick($0) })
            await producer.close()
            #expect(reports.allSatisfy { $0.error == nil })
            return reports
        }
        var reports = try await produce(0..<5000)
        let worker = try Self.startWorker("prices-decode", topology: path, bootstrap: bootstrap)
        defer { worker.kill() }
        try await worker.waitForLine(containing: "partitions assigned", timeout: .seconds(30))
        // The broker dies mid-stream (SIGKILL) and comes back on the same port and storage.
        broker = try await broker.restart()
        reports += try await produce(5000..<10_000)

        // tansu on S3 can lose records it acknowledged just before a restart (a CI run waited
        // for ever for the outputs of inputs it no longer held): the worker owes an output for
        // each input the topic holds, and the topic must hold every acknowledged one.
        let inputs = try await Self.readAll("prices.raw", partitions: 4, bootstrap: bootstrap) { _ in true }
        let acknowledged = Set(reports.map { "\($0.partition)@\($0.offset)" })
        let held = Set(inputs.map { "\($0.partition)@\($0.offset)" })
        if !acknowledged.isSubset(of: held) {
            withKnownIssue("tansu on S3 loses records it acknowledged just before a restart", isIntermittent: true) {
                Issue.record("the broker lost \(acknowledged.subtracting(held).count) acknowledged inputs in its restart")
            }
        }
        func outputs(_ ticks: [ConsumerRecord]) -> Int { Set(ticks.compactMap { $0.header(OutputRecord.dedupeKeyHeader) }).count }
        var ticks: [ConsumerRecord]
        do {
            ticks = try await Self.readAll("prices.ticks", partitions: 4, bootstrap: bootstrap, within: .seconds(90)) { outputs($0) >= held.count }
        } catch LocalBrokerError.timedOut {
            ticks = try await Self.readAll("prices.ticks", partitions: 4, bootstrap: bootstrap) { _ in true }
        }
        worker.terminate()
        let status = await worker.waitForExit()
        #expect(status == 0, "\(worker.recentOutput())")
        let checkAdmin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        let committed = try await checkAdmin.committedOffsets(group: "prices-decode", partitions: (0..<4).map { TopicPartition("prices.raw", $0) })
        await checkAdmin.close()
        let ends = Dictionary(grouping: inputs, by: \.partition).mapValues { $0.map(\.offset).max()! + 1 }
        for c in committed { #expect(c.offset == ends[c.partition], "committed \(c)") }
        if outputs(ticks) < held.count, committed.allSatisfy({ $0.offset == ends[$0.partition] }) {
            // The worker commits an input only once the broker acknowledged its outputs: with
            // every input committed, the missing outputs are ones tansu acknowledged and then
            // lost in its restart (a CI run under load: 9,042 of 10,000).
            withKnownIssue("tansu on S3 loses records it acknowledged just before a restart", isIntermittent: true) {
                Issue.record("the broker lost \(held.count - outputs(ticks)) acknowledged outputs in its restart")
            }
        } else {
            #expect(outputs(ticks) == held.count, "every input processed")
        }
        await broker.stop()
    }
}

