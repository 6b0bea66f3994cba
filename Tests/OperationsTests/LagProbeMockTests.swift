import Foundation
import Testing
@testable import Pipeline
import PipelineTesting
@testable import Kafka
@testable import Operations

/// Lag arithmetic where the broker is right about everything: librdkafka's mock cluster, whose
/// ListOffsets(latest) and fetch high watermark agree.
@Suite(.timeLimit(.minutes(2))) struct LagProbeMockTests {
    @Test func lagInRecordsAndSecondsAndStatusOverRounds() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("ticks", partitions: 2)
        let kafka = KafkaConfiguration(bootstrapServers: [mock.bootstrapServers])
        let t0: Int64 = 1_700_000_000_000
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka))
        let records = (0..<100).map { i in
            ProducerRecord(topic: "ticks", partition: i < 60 ? 0 : 1, value: Array("v\(i)".utf8), timestamp: t0 + Int64(i) * 1000)
        }
        #expect(try await producer.send(records).allSatisfy { $0.error == nil })

        var config = ConsumerConfiguration(kafka: kafka, groupID: "candles")
        config.autoCommit = false
        let committer = try KafkaConsumer(configuration: config)
        try await committer.commit([TopicPartitionOffset("ticks", 0, offset: 20), TopicPartitionOffset("ticks", 1, offset: 40)])

        let admin = try KafkaAdmin(configuration: kafka)
        let probe = LagProbe(reader: TopicReader(kafka: kafka))
        var windows: [TopicPartition: CommitWindow] = [:]
        var now = t0 + 200_000
        let first = try await probe.groupLag("candles", admin: admin, topics: ["ticks"], windows: &windows, windowSize: 3, now: { now })
        // Partition 0: 60 records, committed 20 → lag 40; record 20 is at t0 + 20 s.
        // Partition 1: 40 records, committed 40 → caught up.
        #expect(first.partitions.map(\.logEnd) == [60, 40])
        #expect(first.partitions.map(\.lagRecords) == [40, 0])
        #expect(first.partitions.map(\.recordAgeSeconds) == [180, 0], "the first waiting record's own age")
        #expect(first.partitions.map(\.lagSeconds) == [nil, 0], "lag in time needs two observations of the log end")
        #expect(first.maxLagSeconds == nil)
        #expect(first.totalLag == 40)
        // The mock's ListOffsets agrees with the fetch high watermark.
        #expect(try await admin.watermarks(TopicPartition("ticks", 0)).high == 60)

        // Two more rounds: partition 0 does not move while 10 more records arrive → STALL
        // (when the mock reports no members, STOP: both make the group ERR).
        for round in 1...2 {
            _ = try await producer.send((0..<5).map { i in
                ProducerRecord(topic: "ticks", partition: 0, value: [UInt8(i)], timestamp: t0 + 100_000 + Int64(round * 10 + i))
            })
            now += 5000
            let lag = try await probe.groupLag("candles", admin: admin, topics: ["ticks"], windows: &windows, windowSize: 3, now: { now })
            #expect(lag.partitions[0].lagRecords == 40 + Int64(round) * 5)
            // The log end grows 5 records per 5 s and passed offset 20 forty records before the
            // first observation: 40 s before it, 45 s and 50 s ago (whatever the records' times).
            #expect(lag.partitions[0].lagSeconds == 40 + 5 * Double(round), "round \(round)")
            if round == 2 {
                #expect([.stall, .stop].contains(lag.partitions[0].status), "\(lag.partitions[0].status)")
                #expect(lag.partitions[1].status == .ok)
                #expect(lag.status == lag.partitions[0].status, "the group shows its worst partition's status")
            }
        }
        // Then the consumer catches up: OK again.
        try await committer.commit([TopicPartitionOffset("ticks", 0, offset: 70)])
        now += 5000
        let caughtUp = try await probe.groupLag("candles", admin: admin, topics: ["ticks"], windows: &windows, windowSize: 3, now: { now })
        #expect(caughtUp.partitions[0].lagRecords == 0)
        #expect(caughtUp.status == .ok)

        try await committer.close()
        await producer.close()
        await admin.close()
        withExtendedLifetime(mock) {}  // the cluster must outlive every client (Swift may release it after its last use)
    }

    /// A partition the group has never committed, with records waiting, is lag from the log
    /// start (where `auto.offset.reset=earliest` starts the group's first member), not 0.
    @Test func aPartitionNeverCommittedLagsFromTheLogStart() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("waiting", partitions: 2)
        let kafka = KafkaConfiguration(bootstrapServers: [mock.bootstrapServers])
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka))
        let sent = try await producer.send((0..<20).map { ProducerRecord(topic: "waiting", partition: Int32($0 % 2), value: [UInt8($0)]) })
        #expect(sent.allSatisfy { $0.error == nil })
        let admin = try KafkaAdmin(configuration: kafka)
        var windows: [TopicPartition: CommitWindow] = [:]
        let lag = try await LagProbe(reader: TopicReader(kafka: kafka)).groupLag("never-ran", admin: admin, topics: ["waiting"], windows: &windows)
        #expect(lag.partitions.map(\.lagRecords) == [10, 10], "\(lag.partitions.map(\.lagRecords))")
        #expect(lag.partitions.allSatisfy { $0.neverCommitted })
        #expect(lag.totalLag == 20)
        await producer.close()
        await admin.close()
        withExtendedLifetime(mock) {}
    }
}
