import Deadlines
import Foundation
import Synchronization
import Testing
@testable import Pipeline
import PipelineTesting
import Workers
@testable import Kafka
@testable import Operations

/// Rules of the consumer, the producer and the deadlines at their edges (cancellation at awkward
/// moments, uncancellable work, close with unawaited batches), without a broker or on
/// librdkafka's mock cluster (closing during a rebalance: IntegrationTests, it needs the real
/// broker).
@Suite(.timeLimit(.minutes(2))) struct RuntimeDefectTests {
    static func consumerConfig(_ bootstrap: String, group: String) -> ConsumerConfiguration {
        var config = ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: group)
        config.sessionTimeout = .milliseconds(6000)
        config.heartbeatInterval = .milliseconds(300)
        return config
    }

    /// A task cancelled while it handles an event ends at its next `next()`, also on an idle
    /// topic (a cancellation handler only fires for a wait already registered).
    @Test func aTaskCancelledWhileHandlingAnEventEndsAtItsNextNext() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("idle", partitions: 1)
        let consumer = try KafkaConsumer(configuration: Self.consumerConfig(mock.bootstrapServers, group: "idle"))
        try consumer.subscribe(["idle"])
        let (handling, handlingContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        let task = Task {
            var events = consumer.makeAsyncIterator()
            _ = try await events.next()  // the assignment
            handlingContinuation.yield()
            for await _ in release { break }  // "handling" the event while being cancelled
            return try await events.next()  // idle topic: must not wait forever
        }
        for await _ in handling { break }
        task.cancel()
        releaseContinuation.yield()
        let next = try await Deadline.race(.seconds(10)) { try? await task.value }
        #expect(next != nil, "next() returned within 10 s")
        #expect(next.flatMap { $0 } == nil, "and ended the sequence")
        try await consumer.close()
    }

    /// A task cancelled just as its `next()` begins waiting (after the check for an earlier
    /// cancellation, before its wait is registered) ends, also on an idle topic, though the
    /// cancellation handler ran with nothing to resume: a worker told to stop after its last
    /// input (`--stop-after`, a graceful shutdown) must not hang there. Cancels at spread-out
    /// moments, many times; each `next()` must end.
    @Test func aTaskCancelledAsItsNextBeginsEnds() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("idle", partitions: 1)
        let consumer = try KafkaConsumer(configuration: Self.consumerConfig(mock.bootstrapServers, group: "idle-race"))
        try consumer.subscribe(["idle"])
        var events = consumer.makeAsyncIterator()
        _ = try await events.next()  // the assignment
        var hung = 0
        for attempt in 0..<3_000 {
            let started = StartFlag()
            let task = Task {
                var events = consumer.makeAsyncIterator()
                started.value.store(true, ordering: .releasing)
                return try await events.next()
            }
            while !started.value.load(ordering: .acquiring) {}
            // Spin for a moment that moves through the window (a few hundred nanoseconds wide).
            var spin = 0
            for _ in 0..<(attempt % 300) { spin &+= 1 }
            _ = spin
            task.cancel()
            if await Deadline.race(.seconds(5), { try? await task.value }) == nil { hung += 1; break }
        }
        #expect(hung == 0, "a next() cancelled as it began waited more than 5 s")
        try await consumer.close()
    }

    /// `Deadline.race` and `waitForLine` return at their deadline, whatever uncancellable work is
    /// still running (a task group would wait for all its children).
    /// No wall clock: the work cannot end before the test lets it, so returning at all proves
    /// the deadline did not wait for it.
    @Test func deadlinesBoundUncancellableWork() async throws {
        let gate = Gate()
        let result = await Deadline.race(.milliseconds(200)) { await gate.wait() }
        #expect(result == nil, "the race returned at its deadline, the work still waiting for the gate")
        gate.open()

        let sleeper = try ManagedProcess.launch("/bin/sleep", arguments: ["30"], environment: [:])
        defer { sleeper.kill() }
        await #expect(throws: LocalBrokerError.self) {
            try await sleeper.waitForLine(containing: "never printed", timeout: .milliseconds(200))
        }
        #expect(sleeper.isRunning, "waitForLine returned at its timeout, not when the process ended")
    }

    /// Closing the producer keeps the reports of batches delivered but not awaited yet: they are
    /// delivered, not failed.
    @Test func closingTheProducerKeepsDeliveredReportsOfUnawaitedBatches() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("out", partitions: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let ticket = try await producer.submit((0..<10).map { ProducerRecord(topic: "out", value: Array("\($0)".utf8)) })
        try await producer.flush(deadline: .seconds(10))
        await producer.close()
        let reports = await ticket.reports()
        #expect(reports.count == 10)
        #expect(reports.allSatisfy { $0.error == nil && $0.offset >= 0 }, "\(reports.compactMap(\.error))")
    }
}

/// An async wait nobody can cancel, opened by hand.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    func wait() async {
        await withCheckedContinuation { c in
            let now = state.withLock { s in
                if s.open { return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }
    func open() {
        let waiters = state.withLock { s in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }
}

/// Set by a task when it starts (a test spins on it to cancel the task at a chosen moment).
private final class StartFlag: Sendable {
    let value = Atomic<Bool>(false)
}
