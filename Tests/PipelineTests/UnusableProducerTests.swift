import Deadlines
import Foundation
import Logging
import Testing
@testable import Kafka
@testable import Pipeline
import PipelineTesting
import Workers

/// A producer that cannot deliver any more because of its own state (a fatal error; a broker
/// that fenced it or lost its producer id, as a restarted tansu does, which librdkafka does not
/// raise as fatal) is replaced by the services that own one, and stops a worker with the reason:
/// it never fails every record on for good while the process looks alive.
@Suite(.serialized, .timeLimit(.minutes(2))) struct UnusableProducerTests {
    static func record(_ i: Int) -> ProducerRecord {
        ProducerRecord(topic: "t", partition: 0, key: Array("k\(i)".utf8), value: Array("v\(i)".utf8))
    }

    static func slot(_ mock: KafkaMockCluster) throws -> ProducerSlot {
        try ProducerSlot.durable(
            kafka: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]), deliveryTimeout: .seconds(5),
            logger: Logger(label: "test"))
    }

    /// PRODUCER_FENCED (90) or INVALID_PRODUCER_EPOCH (47) on the old producer's produce: the
    /// slot's next producer is a new one, which delivers. (UNKNOWN_PRODUCER_ID alone, librdkafka
    /// 2.16 recovers from by itself: the record is delivered.)
    @Test(arguments: [Int32(90), 47]) func aFencedProducerIsReplaced(_ code: Int32) async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("t", partitions: 1)
        let slot = try Self.slot(mock)
        #expect(try await slot.current().send(Self.record(0)).error == nil)
        let old = slot.current()
        mock.pushRequestErrors(apiKey: 0, errorCodes: Array(repeating: code, count: 3))
        let failed = try await old.send([Self.record(1)])
        #expect(failed[0].error != nil, "the old producer's record fails")
        #expect(old.unusable != nil, "and the producer says it cannot deliver any more: \(failed[0].error.map { "\($0)" } ?? "")")
        let fresh = slot.current()
        #expect(fresh !== old)
        #expect(slot.replacements == 1)
        // The errors left on the broker's stack are for any producer: drain them, then deliver.
        var delivered = false
        for i in 2..<10 where !delivered {
            delivered = try await slot.current().send([Self.record(i)])[0].error == nil
        }
        #expect(delivered, "a new producer delivers")
        await slot.close(deadline: .seconds(2))
    }

    /// A fatal error (librdkafka's own, injected as the broker would cause it) likewise.
    @Test func aFatalProducerIsReplaced() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("t", partitions: 1)
        let slot = try Self.slot(mock)
        let old = slot.current()
        old.raiseFatalError(rawCode: 59, reason: "injected by the test")
        #expect(old.unusable?.isFatal == true)
        let fresh = slot.current()
        #expect(fresh !== old && slot.replacements == 1)
        #expect(try await fresh.send(Self.record(0)).error == nil)
        await slot.close(deadline: .seconds(2))
    }

    /// A worker whose producer is fenced stops with the reason (exit non-zero, health down)
    /// instead of dead-lettering its outputs, whose dead letters fail the same way, forever.
    @Test func aWorkerWhoseProducerIsFencedStopsWithTheReason() async throws {
        // The outputs' leader (broker 2) fences; the inputs and dead letters are on broker 1.
        let mock = try KafkaMockCluster(brokers: 2)
        for t in ["in", "out", "dlq"] {
            try mock.createTopic(t, partitions: 1)
            mock.setPartitionLeader(t, partition: 0, brokerID: t == "out" ? 2 : 1)
        }
        mock.setCoordinator("group", key: "relay", brokerID: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "in", partition: 0, key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        let topology = try Topology.parse("""
            topics:
              - {name: in}
              - {name: out}
              - {name: dlq}
            stages:
              - name: relay
                chain: [pass-through]
                inputs: [in]
                outputs: {out: out}
                dead-letter-topic: dlq
            """)
        var settings = WorkerSettings(bootstrapServers: [mock.bootstrapServers])
        settings.sessionTimeout = .seconds(6)
        settings.heartbeatInterval = .milliseconds(300)
        settings.statisticsInterval = nil
        let service = try StageService(definition: try topology.stage(named: "relay"), topology: topology, settings: settings.measured())
        let outcome = Task { () -> String in
            do {
                try await service.run()
                return "returned without an error"
            } catch {
                return "\(error)"
            }
        }
        try await eventually("the first inputs settled") { service.readings.inputsSettled == 20 }
        mock.pushRequestErrors(brokerID: 2, apiKey: 0, errorCodes: Array(repeating: 90, count: 500))
        _ = try await producer.send((20..<40).map { ProducerRecord(topic: "in", partition: 0, key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        await producer.close()
        let message = await Deadline.race(.seconds(60)) { await outcome.value }
        #expect(message?.contains("cannot deliver any more") == true, "\(message ?? "still running after 60 s")")
        #expect(service.readings.deadLettered == 0, "nothing dead-lettered for a broken producer")
    }
}
