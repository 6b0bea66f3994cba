import Foundation
import Testing
import Pipeline
import Kafka
import Operations

/// Consumer groups on the real local broker (tansu), started on a free port per test.
@Suite(.timeLimit(.minutes(3))) struct ConsumerGroupTests {
    /// What one group member saw, collected by its iteration task.
    actor Member {
        let name: String
        private(set) var assignment: Set<TopicPartition> = []
        private(set) var records: [ConsumerRecord] = []
        private var watchers: [(condition: @Sendable (Member.Snapshot) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []

        struct Snapshot: Sendable {
            var assignment: Set<TopicPartition>
            var count: Int
        }

        init(_ name: String) { self.name = name }

        func apply(_ event: ConsumerEvent) {
            switch event {
            case .assigned(let partitions): assignment.formUnion(partitions)
            case .revoked(let partitions), .lost(let partitions): assignment.subtract(partitions)
            case .records(let batch): records += batch
            case .endOfPartition: break
            }
            let snapshot = Snapshot(assignment: assignment, count: records.count)
            let (ready, waiting) = (watchers.filter { $0.condition(snapshot) }, watchers.filter { !$0.condition(snapshot) })
            watchers = waiting
            for w in ready { w.continuation.resume() }
        }

        /// Returns once the member's state satisfies `condition` (checked on every event).
        func until(_ condition: @escaping @Sendable (Snapshot) -> Bool) async {
            if condition(Snapshot(assignment: assignment, count: records.count)) { return }
            await withCheckedContinuation { watchers.append((condition, $0)) }
        }
    }

    /// Iterates a consumer: applies each event to the member, stores processed offsets.
    static func run(_ consumer: KafkaConsumer, into member: Member) -> Task<Void, any Error> {
        Task {
            for try await event in consumer {
                if case .records(let batch) = event { try consumer.store(batch) }
                await member.apply(event)
            }
        }
    }

    static func consumer(_ bootstrap: String, group: String, topic: String) throws -> KafkaConsumer {
        var config = ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: group)
        // tansu answers JoinGroup after about half the session timeout.
        config.sessionTimeout = .milliseconds(2000)
        config.heartbeatInterval = .milliseconds(300)
        config.autoCommit = false
        config.maxBatchSize = 500
        let consumer = try KafkaConsumer(configuration: config)
        try consumer.subscribe([topic])
        return consumer
    }

    static func keyedRecords(topic: String, range: Range<Int>, keys: Int) -> [ProducerRecord] {
        range.map { i in
            ProducerRecord(topic: topic, key: Array("user-\(i % keys)".utf8), value: Array("\(i)".utf8))
        }
    }

    /// The next offset per partition, from delivery reports (exact, unlike tansu's ListOffsets).
    static func endOffsets(_ reports: [DeliveryReport], topic: String) -> [TopicPartition: Int64] {
        var end: [TopicPartition: Int64] = [:]
        for r in reports {
            let tp = TopicPartition(topic, r.partition)
            end[tp] = max(end[tp] ?? 0, r.offset + 1)
        }
        return end
    }

    @Test func twoMembersSplitPartitionsThenOneTakesOver() async throws {
        try await LocalBroker.with { broker in try await twoMembersSplitPartitionsThenOneTakesOver(broker) }
    }

    func twoMembersSplitPartitionsThenOneTakesOver(_ broker: LocalBroker) async throws {
        let bootstrap = broker.bootstrapServers
        let topic = "orders"
        let group = "order-workers"

        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        try await admin.createTopic(TopicSpec(name: topic, partitions: 4))
        #expect(try await admin.describeTopic(topic).partitions == 4)

        // Both members join and split the four partitions before anything is produced.
        let consumerA = try Self.consumer(bootstrap, group: group, topic: topic)
        let consumerB = try Self.consumer(bootstrap, group: group, topic: topic)
        let a = Member("a"), b = Member("b")
        let taskA = Self.run(consumerA, into: a)
        let taskB = Self.run(consumerB, into: b)
        await a.until { $0.assignment.count == 2 }
        await b.until { $0.assignment.count == 2 }
        let assignedA = await a.assignment, assignedB = await b.assignment
        #expect(assignedA.isDisjoint(with: assignedB))
        #expect(assignedA.union(assignedB).count == 4)

        // 10,000 keyed messages.
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        let reports = try await producer.send(Self.keyedRecords(topic: topic, range: 0..<10_000, keys: 100))
        #expect(reports.allSatisfy { $0.error == nil })
        let end = Self.endOffsets(reports, topic: topic)

        // Wait until every message has arrived at one of the members.
        let total = 10_000
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // Each member waits for its own partitions' share.
                let share = end.filter { assignedA.contains($0.key) }.values.reduce(0, +)
                await a.until { $0.count >= Int(share) }
            }
            group.addTask {
                let share = end.filter { assignedB.contains($0.key) }.values.reduce(0, +)
                await b.until { $0.count >= Int(share) }
            }
        }
        let recordsA = await a.records, recordsB = await b.records
        let all = recordsA + recordsB
        #expect(all.count == total)
        #expect(Set(all.map { String(decoding: $0.value!, as: UTF8.self) }).count == total, "each message exactly once")
        #expect(Set(recordsA.map(\.topicPartition)).isSubset(of: assignedA))
        #expect(Set(recordsB.map(\.topicPartition)).isSubset(of: assignedB))
        // Per-key order: the values of one key arrive in the order they were sent.
        for records in [recordsA, recordsB] {
            var lastByKey: [[UInt8]: Int] = [:]
            for r in records {
                let value = Int(String(decoding: r.value!, as: UTF8.self))!
                if let previous = lastByKey[r.key!] { #expect(previous < value, "order of key \(String(decoding: r.key!, as: UTF8.self))") }
                lastByKey[r.key!] = value
            }
        }

        // Committed offsets equal the end offsets.
        try await consumerA.commit()
        try await consumerB.commit()
        let committed = try await admin.committedOffsets(group: group, partitions: end.keys.sorted { $0.partition < $1.partition })
        #expect(Dictionary(uniqueKeysWithValues: committed.map { ($0.topicPartition, $0.offset) }) == end)

        // B leaves; A takes all four partitions and continues from the committed offsets.
        try await consumerB.close()
        _ = try await taskB.value
        await a.until { $0.assignment.count == 4 }
        let before = await a.records.count
        let more = try await producer.send(Self.keyedRecords(topic: topic, range: 10_000..<11_000, keys: 100))
        #expect(more.allSatisfy { $0.error == nil })
        await a.until { $0.count >= before + 1000 }
        let after = Array(await a.records.dropFirst(before))
        #expect(after.count == 1000, "nothing re-read")
        #expect(Set(after.map { String(decoding: $0.value!, as: UTF8.self) }) == Set((10_000..<11_000).map { "\($0)" }))
        for r in after { #expect(r.offset >= end[r.topicPartition]!, "continues after the committed offset of \(r.topicPartition)") }

        await producer.close()
        try await consumerA.close()
        _ = try await taskA.value
    }

    @Test func adminCreatesListsAndDeletesTopics() async throws {
        try await LocalBroker.with { broker in try await adminCreatesListsAndDeletesTopics(broker) }
    }

    func adminCreatesListsAndDeletesTopics(_ broker: LocalBroker) async throws {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
        try await admin.createTopic(TopicSpec(name: "prices.latest", partitions: 3, cleanupPolicy: .compact))
        try await admin.createTopic(TopicSpec(name: "events", partitions: 2))
        let existing = await #expect(throws: KafkaError.self) { try await admin.createTopic(TopicSpec(name: "events", partitions: 2)) }
        #expect(existing?.code == .admin)
        try await admin.createTopic(TopicSpec(name: "events", partitions: 2), ignoreExisting: true)
        let topics = try await admin.listTopics()
        #expect(topics.map(\.name).contains("prices.latest"))
        #expect(topics.first { $0.name == "prices.latest" }?.partitions == 3)
        #expect(topics.first { $0.name == "events" }?.partitions == 2)
        #expect(topics.first { $0.name == "prices.latest" }?.cleanupPolicy == "compact")
        try await admin.deleteTopic("events")
        #expect(!(try await admin.listTopics()).map(\.name).contains("events"))
    }
}

/// The local broker with S3 storage (a local moto_server) survives a hard restart.
@Suite(.timeLimit(.minutes(2))) struct LocalBrokerRestartTests {
    @Test func recordsSurviveAKilledBrokerOnS3Storage() async throws {
        let broker = try await LocalBroker.start(LocalBroker.Options(storage: .s3))
        var current = broker
        do {
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "durable", partitions: 1))
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [broker.bootstrapServers]))
            let reports = try await producer.send((0..<100).map { ProducerRecord(topic: "durable", value: Array("\($0)".utf8)) })
            #expect(reports.allSatisfy { $0.error == nil })
            await producer.close()

            current = try await broker.restart()  // SIGKILL, then start again on the same port and bucket

            var config = ConsumerConfiguration(bootstrapServers: [current.bootstrapServers], groupID: "after-restart")
            config.sessionTimeout = .milliseconds(2000)
            config.heartbeatInterval = .milliseconds(300)
            let consumer = try KafkaConsumer(configuration: config)
            try consumer.subscribe(["durable"])
            var values: [String] = []
            for try await event in consumer {
                guard case .records(let batch) = event else { continue }
                values += batch.map { String(decoding: $0.value!, as: UTF8.self) }
                if values.count >= 100 { break }
            }
            try await consumer.close()
            #expect(values == (0..<100).map { "\($0)" })
        } catch {
            await current.stop()
            throw error
        }
        await current.stop()
    }
}
