import Foundation
import Testing
@testable import Kafka

/// Group admin requests (committed offsets, describe, alter) go to the group's coordinator, and
/// one that is not answered in time leaves its librdkafka handle for a fresh one
/// (`KafkaAdmin.coordinated`; on the local broker, where librdkafka 2.16 aborted the process
/// once the coordinator came back: `AdminOutageTests`).
@Suite(.timeLimit(.minutes(2))) struct AdminCoordinatorTests {
    /// On the mock cluster the same client kept the abandoned request's state: none of 40 tries,
    /// one a second after the coordinator came back, was answered. With the handle replaced,
    /// the next one is.
    @Test func aGroupRequestIsAnsweredOnceTheCoordinatorIsBackAfterOneTimedOut() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        try mock.createTopic("t", partitions: 1)
        mock.setCoordinator("group", key: "g", brokerID: 2)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]), timeout: .seconds(1))
        // Known to the client first, so that the request below waits for this broker.
        _ = try await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])
        mock.setBrokerDown(2)
        await #expect(throws: KafkaError.self, "the coordinator is down") {
            _ = try await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])
        }
        mock.setBrokerUp(2)
        var answered = false
        for _ in 0..<10 where !answered {
            answered = (try? await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])) != nil
        }
        #expect(answered)
        await admin.close()
    }
}
