import Foundation
import Testing
import Pipeline
import Kafka
import Operations

/// Closing a group member while its group rebalances, on the real local broker: the offsets it
/// stored are committed all the same (before the fix the final commit failed with
/// REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION and they were lost).
@Suite(.timeLimit(.minutes(2))) struct CloseDuringRebalanceTests {
    static func config(_ bootstrap: String) -> ConsumerConfiguration {
        var config = ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: "closing")
        config.sessionTimeout = .milliseconds(2000)
        config.heartbeatInterval = .milliseconds(300)
        config.autoCommit = false
        return config
    }

    @Test(arguments: [false, true]) func storedOffsetsSurviveACloseDuringARebalance(ackRevocation: Bool) async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            try await admin.createTopic(TopicSpec(name: "moving", partitions: 4))
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            let sent = try await producer.send((0..<400).map { ProducerRecord(topic: "moving", partition: Int32($0 % 4), value: Array("\($0)".utf8)) })
            #expect(sent.allSatisfy { $0.error == nil })
            await producer.close()

            let a = try KafkaConsumer(configuration: Self.config(bootstrap))
            try a.subscribe(["moving"])
            var stored = 0
            var events = a.makeAsyncIterator()
            while stored < 400, let event = try await events.next() {
                if case .records(let batch) = event {
                    try a.store(batch)
                    stored += batch.count
                }
            }
            let b = try KafkaConsumer(configuration: Self.config(bootstrap))
            try b.subscribe(["moving"])
            let bTask = Task { for try await _ in b {} }
            let revoked = try await events.next()
            if case .revoked = revoked {} else { Issue.record("expected a revocation, got \(String(describing: revoked))") }
            var moveOn: Task<ConsumerEvent?, any Error>?
            if ackRevocation {
                moveOn = Task { [events] in
                    var events = events
                    return try await events.next()
                }
            }
            try await a.close(deadline: .seconds(20))
            _ = try? await moveOn?.value

            let committed = try await admin.committedOffsets(group: "closing", partitions: (0..<4).map { TopicPartition("moving", $0) })
            #expect(committed.reduce(0) { $0 + max(0, $1.offset) } == 400, "\(committed)")
            await admin.close()
            try await b.close()
            _ = try? await bTask.value
        }
    }
}
