import Testing
@testable import Kafka
import PipelineTesting

/// A consumer fetches one event ahead of the application. Moving its position (a seek, a new
/// assignment) must not hand out what was fetched for the old position: a changelog restore
/// that reuses a reader would end on the previous restore's end-of-partition event, and a
/// partition rewound after an aborted transaction would see records from past the rewind.
@Suite(.serialized, .timeLimit(.minutes(2))) struct ConsumerPositionTests {
    static func reader(_ mock: KafkaMockCluster, batch: Int = 1000) throws -> KafkaConsumer {
        var config = ConsumerConfiguration(bootstrapServers: [mock.bootstrapServers], groupID: "reader")
        config.reportEndOfPartition = true
        config.autoCommit = false
        config.maxBatchSize = batch
        return try KafkaConsumer(configuration: config)
    }

    static func produce(_ mock: KafkaMockCluster, _ range: Range<Int>) async throws {
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let reports = try await producer.send(range.map { ProducerRecord(topic: "t", partition: 0, value: Array("\($0)".utf8)) })
        #expect(reports.allSatisfy { $0.error == nil })
        await producer.close()
    }

    /// The next records event (skipping end-of-partition markers when `skippingEnds`).
    static func nextRecords(_ events: inout KafkaConsumer.AsyncIterator) async throws -> [ConsumerRecord] {
        while let event = try await events.next() {
            if case .records(let batch) = event { return batch }
        }
        return []
    }

    @Test func aSeekDropsWhatWasFetchedBeforeIt() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("t", partitions: 1)
        try await Self.produce(mock, 0..<100)
        let reader = try Self.reader(mock, batch: 10)
        try await reader.assign([TopicPartitionOffset("t", 0, offset: TopicPartitionOffset.beginning)])
        var events = reader.makeAsyncIterator()
        let first = try await Self.nextRecords(&events)
        #expect(first.map(\.offset) == Array(0..<10))
        try await eventually("the next batch fetched ahead") { reader.bufferedEvents >= 1 }
        try await reader.seek([TopicPartitionOffset("t", 0, offset: 5)])
        let next = try await Self.nextRecords(&events)
        #expect(next.first?.offset == 5, "the first record after the seek is the one sought, not one fetched before: \(next.map(\.offset))")
        try await reader.close()
    }

    @Test func anAssignmentDropsWhatWasFetchedForTheOldOne() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("t", partitions: 1)
        try await Self.produce(mock, 0..<3)
        let reader = try Self.reader(mock)
        try await reader.assign([TopicPartitionOffset("t", 0, offset: TopicPartitionOffset.beginning)])
        var events = reader.makeAsyncIterator()
        while let event = try await events.next() {
            if case .endOfPartition = event { break }
        }
        // A record arrives after the end was reported; the reader fetches it ahead.
        try await Self.produce(mock, 3..<4)
        try await eventually("the new record fetched ahead") { reader.bufferedEvents >= 1 }
        try await reader.assign([])
        try await reader.assign([TopicPartitionOffset("t", 0, offset: TopicPartitionOffset.beginning)])
        let next = try await Self.nextRecords(&events)
        #expect(next.first?.offset == 0, "the new assignment reads from its own start: \(next.map(\.offset))")
        try await reader.close()
    }
}
