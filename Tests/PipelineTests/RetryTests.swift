import Foundation
import Logging
import Testing
@testable import Pipeline
import PipelineTesting
import Workers
@testable import Kafka

/// Failed deliveries, made on demand with librdkafka's mock cluster: retried with backoff while
/// the partition is paused, dead-lettered with the error once the attempts are spent, and never
/// skipped; the worker keeps going and commits everything.
@Suite(.serialized, .timeLimit(.minutes(2))) struct RetryTests {
    static func topology(attempts: Int) throws -> Topology {
        try Topology.parse("""
            topics:
              - {name: in, partitions: 2}
              - {name: out, partitions: 2}
              - {name: dlq, partitions: 1}
            stages:
              - name: relay
                chain: [pass-through]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                retry: {attempts: \(attempts), initial-backoff: 50ms, max-backoff: 200ms}
            """)
    }

    static func run(attempts: Int, slowFor condition: @escaping @Sendable (StageReadings) -> Bool) async throws
        -> (readings: StageReadings, outputs: [ConsumerRecord], deadLetters: [ConsumerRecord], committed: Int64)
    {
        // The output topic has a broker of its own, so that slowing it fails the outputs only:
        // the input, the group and the dead-letter topic stay on broker 1 and keep working.
        let mock = try KafkaMockCluster(brokers: 2)
        for (t, p) in [("in", 2), ("out", 2), ("dlq", 1)] {
            try mock.createTopic(t, partitions: p)
            for partition in 0..<Int32(p) { mock.setPartitionLeader(t, partition: partition, brokerID: t == "out" ? 2 : 1) }
        }
        mock.setCoordinator("group", key: "relay", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let sent = try await producer.send((0..<200).map { ProducerRecord(topic: "in", partition: Int32($0 % 2), key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        #expect(sent.allSatisfy { $0.error == nil })
        await producer.close()

        let topology = try topology(attempts: attempts)
        var settings = WorkerSettings(bootstrapServers: [mock.bootstrapServers])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.messageTimeout = .milliseconds(300)
        settings.maxBatchSize = 20
        let service = try StageService(definition: try topology.stage(named: "relay"), topology: topology, settings: settings.measured())
        let running = Task { try await service.run() }
        // Responses slower than the message timeout: every output fails until its broker recovers.
        mock.setBrokerRoundTrip(2, milliseconds: 1000)
        try await eventually("failures while the broker is slow") { condition(service.readings) }
        mock.setBrokerRoundTrip(2, milliseconds: 0)
        try await eventually("every input settled") { service.readings.inputsSettled >= 200 }
        service.requestStop()
        try await running.value

        func read(_ topic: String, _ partitions: Int) async throws -> [ConsumerRecord] {
            var config = ConsumerConfiguration(bootstrapServers: [mock.bootstrapServers], groupID: "read-\(topic)")
            config.reportEndOfPartition = true
            let reader = try KafkaConsumer(configuration: config)
            try await reader.assign((0..<partitions).map { TopicPartitionOffset(topic, Int32($0), offset: TopicPartitionOffset.beginning) })
            var records: [ConsumerRecord] = []
            var ended = Set<Int32>()
            for try await event in reader {
                if case .records(let b) = event { records += b }
                if case .endOfPartition(let e) = event { ended.insert(e.partition) }
                if ended.count == partitions { break }
            }
            try await reader.close()
            return records
        }
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let committed = try await admin.committedOffsets(group: "relay", partitions: [TopicPartition("in", 0), TopicPartition("in", 1)])
        await admin.close()
        return (service.readings, try await read("out", 2), try await read("dlq", 1), committed.reduce(0) { $0 + max(0, $1.offset) })
    }

    @Test func transientDeliveryFailuresAreRetriedUntilDelivered() async throws {
        let (readings, outputs, deadLetters, committed) = try await Self.run(attempts: 1000) { $0.retries >= 3 }
        #expect(readings.retries >= 3)
        #expect(deadLetters.isEmpty)
        let values = Set(outputs.compactMap(\.value).map { String(decoding: $0, as: UTF8.self) })
        #expect(values == Set((0..<200).map { "v\($0)" }), "every input delivered (duplicates allowed)")
        #expect(committed == 200)
    }

    @Test func outputsThatKeepFailingSendTheirInputsToTheDeadLetterTopic() async throws {
        let (readings, outputs, deadLetters, committed) = try await Self.run(attempts: 2) { $0.deadLettered > 0 && $0.retries >= 6 }
        #expect(readings.retries >= 6)
        #expect(!deadLetters.isEmpty, "some inputs ran out of attempts while the broker was slow")
        for letter in deadLetters {
            #expect(letter.header(DeadLetterHeader.reason) == Array("delivery-failed".utf8))
            #expect(letter.header(DeadLetterHeader.attempts) == Array("2".utf8))
            #expect(letter.header(DeadLetterHeader.errorCode) != nil)
            #expect(letter.header(DeadLetterHeader.firstFailure) != nil)
            #expect(letter.header(DeadLetterHeader.originTopic) == Array("in".utf8))
        }
        // Nothing skipped: every input is delivered or dead-lettered, and all are committed.
        let delivered = Set(outputs.compactMap(\.value).map { String(decoding: $0, as: UTF8.self) })
        let dead = Set(deadLetters.compactMap(\.value).map { String(decoding: $0, as: UTF8.self) })
        #expect(delivered.union(dead) == Set((0..<200).map { "v\($0)" }))
        #expect(committed == 200)
    }

    /// A key's outputs end in input order after a retry. Here the worker's first produce
    /// request (one record per request) is refused once, answered after a second
    /// (NOT_ENOUGH_REPLICAS; the producer makes no retries of its own, so the runtime's retry is
    /// what sends that output again). Meanwhile the later outputs of the same key (180 more
    /// inputs arrive) land first. Whatever landed ahead of the retried outputs must be sent again
    /// after them, so that the last copy of each output comes in input order (a consumer keeping
    /// a key's newest value, or a compacted topic, ends with the newest input's output). The same
    /// for a concurrent (I/O) stage, whose record waits for the earlier record of its key to be
    /// submitted, not acknowledged.
    @Test(arguments: ["sequential", "concurrent"]) func aKeysOutputsEndInInputOrderAfterARetry(_ kind: String) async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["in", "out", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: t == "out" ? 2 : 1)
        }
        mock.setCoordinator("group", key: "relay", brokerID: 1)
        func produce(_ range: Range<Int>) async throws {
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
            let sent = try await producer.send(range.map { ProducerRecord(topic: "in", partition: 0, key: Array("k".utf8), value: Array("v\($0)".utf8)) })
            #expect(sent.allSatisfy { $0.error == nil })
            await producer.close()
        }
        let count = 200
        try await produce(0..<20)

        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: relay
                chain: [\(kind == "concurrent" ? "thumbnails.render" : "pass-through")]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
                retry: {attempts: 5, initial-backoff: 500ms, max-backoff: 500ms}
            """)
        var settings = WorkerSettings(bootstrapServers: [mock.bootstrapServers])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.kafka.raw["enable.idempotence"] = "false"
        settings.kafka.raw["retries"] = "0"
        // One record per request, requests pipelined: the refused request holds the first output
        // only, and the next ones are sent (and land) while its refusal is on the way, however
        // loaded the machine (with batches, one request could take every output).
        settings.kafka.raw["batch.num.messages"] = "1"
        // Produce (API key 0) to the output topic's broker: only the worker sends those.
        mock.pushRequestErrors(brokerID: 2, apiKey: 0, errorCodes: [19], roundTripMilliseconds: 1000)
        let service = try StageService(
            definition: try topology.stage(named: "relay"), topology: topology, settings: settings.measured(),
            concurrent: kind == "concurrent" ? SettlementTests.RelayIO() : nil)
        let running = Task { try await service.run() }
        try await eventually("the first 20 inputs processed") { service.readings.processed >= 20 }
        try await produce(20..<count)
        try await eventually("every input settled") { service.readings.inputsSettled >= count }
        service.requestStop()
        try await running.value
        #expect(service.readings.retries >= 1, "the refused request was retried")
        #expect(service.readings.resent > 0, "outputs that landed ahead were sent again")

        let outputs = try await SettlementTests.read("out", from: mock).compactMap { $0.value.map { String(decoding: $0, as: UTF8.self) } }
        var last: [String: Int] = [:]
        for (position, value) in outputs.enumerated() { last[value] = position }
        #expect(Set(last.keys) == Set((0..<count).map { "v\($0)" }), "every input's output delivered")
        let order = last.sorted { $0.value < $1.value }.map(\.key)
        let landedAhead = outputs.firstIndex(of: "v0") ?? 0
        #expect(landedAhead > 0, "later outputs landed ahead of the retried ones (else this test shows nothing)")
        #expect(order == (0..<count).map { "v\($0)" }, "the last copies in the topic: \(order.prefix(30)) …; \(landedAhead) outputs landed before the first v0")
    }
}

extension RetryTests {
    /// What a worker reports about itself for the console's stage page: errors (failed delivery
    /// attempts) and their rate, outputs per topic, and the end-to-end latency of its interval,
    /// taken once (the next report starts a new interval).
    @Test func theStatusReportCarriesErrorsOutputsPerTopicAndLatency() async throws {
        // The output topic has a broker of its own, so that slowing it fails the outputs only:
        // the input, the group and the dead-letter topic stay on broker 1 and keep working.
        let mock = try KafkaMockCluster(brokers: 2)
        for (t, p) in [("in", 2), ("out", 2), ("dlq", 1)] {
            try mock.createTopic(t, partitions: p)
            for partition in 0..<Int32(p) { mock.setPartitionLeader(t, partition: partition, brokerID: t == "out" ? 2 : 1) }
        }
        mock.setCoordinator("group", key: "relay", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        #expect(try await producer.send((0..<200).map { ProducerRecord(topic: "in", partition: Int32($0 % 2), value: Array("v\($0)".utf8)) })
            .allSatisfy { $0.error == nil })
        await producer.close()
        let topology = try Self.topology(attempts: 1000)
        var settings = WorkerSettings(bootstrapServers: [mock.bootstrapServers])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.messageTimeout = .milliseconds(300)
        settings.maxBatchSize = 20
        let service = try StageService(definition: try topology.stage(named: "relay"), topology: topology, settings: settings.measured())
        let reporter = WorkerStatusReporter(
            service: service, topic: WorkerStatus.defaultTopic, interval: .seconds(1), kafka: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]),
            logger: .init(label: "status"))
        var previous = WorkerStatusReporter.Previous(at: .now)
        let quiet = reporter.status(previous: &previous)
        #expect(quiet.latencyMeanMs == nil && quiet.errors == 0 && quiet.outRates == [:], "nothing yet")
        let running = Task { try await service.run() }
        // Responses slower than the message timeout from the output topic's broker: its outputs fail.
        mock.setBrokerRoundTrip(2, milliseconds: 1000)
        try await eventually("failed deliveries") { service.readings.retries >= 2 }
        mock.setBrokerRoundTrip(2, milliseconds: 0)
        try await eventually("every input settled") { service.readings.inputsSettled >= 200 }
        let status = reporter.status(previous: &previous)
        let next = reporter.status(previous: &previous)
        service.requestStop()
        try await running.value

        #expect((status.errors ?? 0) > 0 && (status.errorRate ?? 0) > 0, "errors \(status.errors ?? -1), \(status.errorRate ?? -1)/s")
        #expect(status.errors == service.readings.deliveryErrors + service.readings.commitFailures,
                "one count: the metrics'")
        #expect(status.outRates?.keys.sorted() == ["out"] && (status.outRates?["out"] ?? 0) > 0, "\(status.outRates ?? [:])")
        #expect(status.deadLettered == 0 && status.deadLetterRate == 0)
        let mean = try #require(status.latencyMeanMs), max = try #require(status.latencyMaxMs)
        #expect(mean > 0 && max >= mean && max < 60_000, "latency mean \(mean) ms, max \(max) ms")
        #expect(next.latencyMeanMs == nil && next.latencyMaxMs == nil, "the interval's latencies were taken by the report before")
        #expect(next.outRates?["out"] == 0, "no outputs since")
    }
}
