import Foundation
import Testing
import PipelineTesting
@testable import Kafka

/// Rebalance hand-over and flow control, on librdkafka's mock cluster.
@Suite(.timeLimit(.minutes(2))) struct RebalanceTests {
    static func consumer(_ bootstrap: String, group: String, topic: String) throws -> KafkaConsumer {
        var config = ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: group)
        config.sessionTimeout = .milliseconds(6000)
        config.heartbeatInterval = .milliseconds(300)
        let consumer = try KafkaConsumer(configuration: config)
        try consumer.subscribe([topic])
        return consumer
    }

    @Test func revokedPartitionsStayAssignedUntilTheApplicationMovesOn() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("handover", partitions: 2)
        let a = try Self.consumer(mock.bootstrapServers, group: "g", topic: "handover")
        var events = a.makeAsyncIterator()

        guard case .assigned(let first)? = try await events.next() else { Issue.record("expected an assignment"); return }
        #expect(first.count == 2)
        #expect(Set(try a.assignment()) == Set(first))

        // A second member joins: the first hears about the revocation while it still owns the partitions.
        let b = try Self.consumer(mock.bootstrapServers, group: "g", topic: "handover")
        let (bAssigned, bAssignedContinuation) = AsyncStream<[TopicPartition]>.makeStream()
        let bTask = Task {
            for try await event in b { if case .assigned(let p) = event { bAssignedContinuation.yield(p) } }
        }
        guard case .revoked(let revoked)? = try await events.next() else { Issue.record("expected a revocation"); return }
        #expect(revoked.count == 1)
        #expect(Set(try a.assignment()).isSuperset(of: revoked), "revoked partitions are still ours while we handle the event")

        // Moving on completes the revocation; only then can the other member get the partition.
        try await Self.expectHandover(revoked, from: a, events: events, to: b, gained: bAssigned, bTask: bTask)
    }

    /// `a` moves on (asks for its next events in the background): the revocation completes and
    /// `b` gains exactly the revoked partitions, which `a` no longer holds. Closes both.
    static func expectHandover(
        _ revoked: [TopicPartition], from a: KafkaConsumer, events: sending KafkaConsumer.AsyncIterator,
        to b: KafkaConsumer, gained: AsyncStream<[TopicPartition]>, bTask: Task<Void, any Error>
    ) async throws {
        let aTask = Task { [events] in
            var events = events
            while let _ = try await events.next() {}
        }
        var gainedIterator = gained.makeAsyncIterator()
        #expect(await gainedIterator.next() == revoked)
        #expect(Set(try a.assignment()).isDisjoint(with: revoked))
        try await b.close()
        try await a.close()
        _ = try await (aTask.value, bTask.value)
    }

    /// The poll thread fetches the next batch while the application works on the last one, so a
    /// rebalance can call back with nobody waiting. The revocation must still reach the
    /// application while the partitions are its own (it can store their offsets), and complete
    /// only once it moves on. (Whether the mock cluster then accepts the revocation's commit
    /// depends on where its rebalance is: it sometimes answers REBALANCE_IN_PROGRESS.)
    @Test func aRevocationDuringTheFetchAheadWaitsForTheApplication() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("ahead", partitions: 2)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "ahead", partition: Int32($0 % 2), value: Array("r\($0)".utf8)) })
        await producer.close()

        let a = try Self.consumer(mock.bootstrapServers, group: "ahead", topic: "ahead")
        var events = a.makeAsyncIterator()
        var seen: [ConsumerRecord] = []
        while seen.count < 20 {
            guard let event = try await events.next() else { Issue.record("the sequence ended"); return }
            if case .records(let batch) = event { seen += batch }
        }
        #expect(seen.count == 20)
        // The application is busy now (it does not ask for the next event); the poll thread is
        // fetching ahead, and finds nothing. A second member joins meanwhile.
        let b = try Self.consumer(mock.bootstrapServers, group: "ahead", topic: "ahead")
        let callbacks = a.rebalanceCallbacks
        let (bAssigned, bAssignedContinuation) = AsyncStream<[TopicPartition]>.makeStream()
        let bTask = Task {
            for try await event in b { if case .assigned(let p) = event, !p.isEmpty { bAssignedContinuation.yield(p) } }
        }
        // A's poll thread hears of the rebalance while A is still busy.
        try await eventually("a rebalance callback while A works", within: .seconds(60)) { a.rebalanceCallbacks > callbacks }
        guard case .revoked(let revoked)? = try await events.next() else { Issue.record("expected a revocation"); return }
        #expect(revoked.count == 1)
        #expect(Set(try a.assignment()).isSuperset(of: revoked), "revoked partitions are still ours while we handle the event")

        // Still ours: storing its offsets is accepted (librdkafka refuses it, `_STATE`, once the
        // partition is gone).
        try a.store(seen.filter { revoked.contains($0.topicPartition) })
        try await Self.expectHandover(revoked, from: a, events: events, to: b, gained: bAssigned, bTask: bTask)
    }

    @Test func pausedPartitionsDeliverNothingUntilResumed() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("flow", partitions: 2)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let consumer = try Self.consumer(mock.bootstrapServers, group: "flow", topic: "flow")
        let p0 = TopicPartition("flow", 0)
        var events = consumer.makeAsyncIterator()
        guard case .assigned? = try await events.next() else { Issue.record("expected an assignment"); return }

        // Paused while handling the assignment: no record of it can have been delivered yet.
        try consumer.pause([p0])
        _ = try await producer.send((0..<50).flatMap { i in [
            ProducerRecord(topic: "flow", partition: 0, value: Array("p0-\(i)".utf8)),
            ProducerRecord(topic: "flow", partition: 1, value: Array("p1-\(i)".utf8)),
        ] })
        // Partition 1's records arrive; partition 0 stays silent while paused.
        var fromP1 = 0
        while fromP1 < 50 {
            guard case .records(let batch)? = try await events.next() else { continue }
            #expect(batch.allSatisfy { $0.partition == 1 }, "nothing from a paused partition")
            fromP1 += batch.count
        }
        try consumer.resume([p0])
        var fromP0 = 0
        while fromP0 < 50 {
            guard case .records(let batch)? = try await events.next() else { continue }
            fromP0 += batch.filter { $0.topicPartition == p0 }.count
        }
        #expect(fromP0 == 50)
        try await consumer.close()
        await producer.close()
    }

    /// `count` records produced to the one partition of topic "commits", and a consumer of
    /// group "c" (no auto-commit) that has read at least `reading` of them.
    static func readingCommits(
        _ mock: KafkaMockCluster, count: Int, reading: Int, sessionTimeout: Duration
    ) async throws -> (KafkaConsumer, [ConsumerRecord]) {
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<count).map { ProducerRecord(topic: "commits", value: Array("\($0)".utf8)) })
        await producer.close()
        var config = ConsumerConfiguration(bootstrapServers: [mock.bootstrapServers], groupID: "c")
        config.sessionTimeout = sessionTimeout
        config.autoCommit = false
        let consumer = try KafkaConsumer(configuration: config)
        try consumer.subscribe(["commits"])
        var seen: [ConsumerRecord] = []
        for try await event in consumer {
            guard case .records(let batch) = event else { continue }
            seen += batch
            if seen.count >= reading { break }
        }
        return (consumer, seen)
    }

    @Test func closeCommitsStoredOffsets() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("commits", partitions: 1)
        let (consumer, seen) = try await Self.readingCommits(mock, count: 30, reading: 20, sessionTimeout: .milliseconds(6000))
        // Only the first 20 are marked processed: the group resumes at 20.
        try consumer.store(seen.prefix(20))
        try await consumer.close(deadline: .seconds(10))
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let committed = try await admin.committedOffsets(group: "c", partitions: [TopicPartition("commits", 0)])
        #expect(committed == [TopicPartitionOffset("commits", 0, offset: 20)])
    }

    /// A commit is answered, and one to a coordinator that does not answer is bounded: it
    /// throws `timedOut` after its timeout, and a cancelled one stops waiting at once
    /// (`rd_kafka_commit` alone waited until the session timed out: 45 s in a worker's CI run).
    @Test func aCommitToACoordinatorThatDoesNotAnswerEndsAtItsTimeoutOrCancellation() async throws {
        let mock = try KafkaMockCluster(brokers: 2)
        try mock.createTopic("commits", partitions: 1)
        mock.setPartitionLeader("commits", partition: 0, brokerID: 1)
        mock.setCoordinator("group", key: "c", brokerID: 2)
        let (consumer, seen) = try await Self.readingCommits(mock, count: 10, reading: 10, sessionTimeout: .seconds(45))
        try consumer.store(seen.prefix(4))
        try await consumer.commit(timeout: .seconds(10))
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        #expect(try await admin.committedOffsets(group: "c", partitions: [TopicPartition("commits", 0)]) == [TopicPartitionOffset("commits", 0, offset: 4)])
        await admin.close()

        mock.setBrokerDown(2)
        try consumer.store(seen.prefix(8))
        let clock = ContinuousClock()
        var started = clock.now
        do {
            try await consumer.commit(timeout: .seconds(2))
            Issue.record("a commit to a coordinator that is down was answered")
        } catch {
            #expect(error.code == .timedOut, "\(error)")
        }
        let timedOut = clock.now - started
        #expect(timedOut >= .seconds(2) && timedOut < .seconds(5), "given up after its timeout: \(timedOut)")
        started = clock.now
        let waiting = Task { try await consumer.commit(timeout: .seconds(30)) }
        waiting.cancel()  // before or while it waits: either way it ends at once
        let outcome = await waiting.result
        let cancelledAfter = clock.now - started
        #expect(cancelledAfter < .seconds(3), "cancelled at once: \(cancelledAfter)")
        if case .failure(let error as KafkaError) = outcome { #expect(error.code == .cancelled, "\(error)") } else { Issue.record("\(outcome)") }
        _ = try? await consumer.close(deadline: .seconds(2))
    }

    /// A member that closes while its group rebalances commits its stored offsets once the
    /// rebalance is over, but only of the partitions it still holds then: the others belong to
    /// another member, which may have committed past them (a commit of ours would move their
    /// offsets back). Here A stored offsets of all four partitions and closes while a second
    /// member joins; its commit inside the revocation is refused (REBALANCE_IN_PROGRESS), and
    /// after the rebalance it holds two of the four (range assignor).
    @Test func aCloseDuringARebalanceCommitsOnlyThePartitionsItStillHolds() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("split", partitions: 4)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<100).map { ProducerRecord(topic: "split", partition: Int32($0 % 4), value: Array("\($0)".utf8)) })
        await producer.close()
        func member() throws -> KafkaConsumer {
            var config = ConsumerConfiguration(bootstrapServers: [mock.bootstrapServers], groupID: "split")
            config.sessionTimeout = .milliseconds(6000)
            config.heartbeatInterval = .milliseconds(300)
            config.autoCommit = false
            config.assignmentStrategy = .range
            let consumer = try KafkaConsumer(configuration: config)
            try consumer.subscribe(["split"])
            return consumer
        }
        let a = try member()
        var events = a.makeAsyncIterator()
        var seen = 0
        while seen < 100, let event = try await events.next() {
            if case .records(let batch) = event { seen += batch.count }
        }
        let all = (0..<4).map { TopicPartition("split", Int32($0)) }
        try a.store(offsets: all.map { TopicPartitionOffset($0.topic, $0.partition, offset: 10) })
        let b = try member()
        let bTask = Task { for try await _ in b {} }
        guard case .revoked? = try await events.next() else { Issue.record("expected a revocation"); return }
        // OffsetCommit (API key 8): the commit inside the revocation is refused as mid-rebalance.
        mock.pushRequestErrors(apiKey: 8, errorCodes: [27])
        try await a.close(deadline: .seconds(20))
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let committed = try await admin.committedOffsets(group: "split", partitions: all)
        await admin.close()
        // A holds two partitions after the rebalance (none if its rejoin came late on a loaded
        // machine): at most those two are committed, and B's two never are.
        #expect(committed.filter { $0.offset == 10 }.count <= 2, "only partitions A holds after the rebalance: \(committed)")
        #expect(committed.filter { $0.offset < 0 }.count >= 2, "B's two are left to B: \(committed)")
        try await b.close()
        _ = try? await bTask.value
    }

    /// The wake-up that ends a waiting poll when the application closes must never reach
    /// `rd_kafka_consumer_close`: a queue yield there ends its wait for the TERMINATE reply, and
    /// the close fails with `_TIMED_OUT` or, left half done, overruns its deadline in destroy.
    /// Many consumers closing at once on two cores widen the window between the two.
    @Test func closingRightAfterAnEventAlwaysCompletes() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("closing", partitions: 2)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        _ = try await producer.send((0..<20).map { ProducerRecord(topic: "closing", value: Array("r\($0)".utf8)) })
        await producer.close()
        for round in 0..<4 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for member in 0..<12 {
                    group.addTask {
                        let consumer = try Self.consumer(mock.bootstrapServers, group: "close-\(round)-\(member)", topic: "closing")
                        var events = consumer.makeAsyncIterator()
                        // Closed right after a batch of records, the poll thread waiting for demand.
                        while let event = try await events.next() {
                            if case .records = event { break }
                        }
                        try await consumer.close()
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}
