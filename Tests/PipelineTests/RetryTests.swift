import Foundation
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
        let mock = try KafkaMockCluster(brokers: 1)
        for (t, p) in [("in", 2), ("out", 2), ("dlq", 1)] { try mock.createTopic(t, partitions: p) }
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
        // Responses slower than the message timeout: every delivery fails until the broker recovers.
        mock.setBrokerRoundTrip(1, milliseconds: 1000)
        try await eventually("failures while the broker is slow") { condition(service.readings) }
        mock.setBrokerRoundTrip(1, milliseconds: 0)
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
        let (readings, outputs, deadLetters, committed) = try await Self.run(attempts: 2) { $0.deadLettered == 0 && $0.retries >= 6 }
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
}
