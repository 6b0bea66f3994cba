import Foundation
import Kafka
import Logging
import Operations
import Synchronization

/// The `Idempotency-Key`s of every replica of `ingest http`, shared through a compacted topic (as
/// the pollers keep their ledger): an answered key's answer, a key that failed part-way and the
/// records of it that are durable. Each replica reads the topic to its end before it serves
/// (so a restart forgets nothing) and then follows it, and writes each outcome before it
/// answers the client: a retry that reaches another replica after the answer was given, or the
/// same replica after a restart, is answered from it and produces nothing.
public struct IdempotencyTopic: Sendable {
    public var topic: String
    public var kafka: KafkaConfiguration

    public init(topic: String, kafka: KafkaConfiguration) {
        self.topic = topic
        self.kafka = kafka
    }

    /// Creates the topic (compacted, one partition) unless it exists.
    public func ensure() async throws {
        try await KafkaAdmin.ensureTopic(TopicSpec(name: topic, partitions: 1, cleanupPolicy: .compact), configuration: kafka)
    }

    /// The record that shares `record`.
    public func record(_ record: IdempotencyRecord) throws -> ProducerRecord {
        ProducerRecord(topic: topic, partition: 0, key: Array(record.id.utf8), value: Array(try JSONEncoder().encode(record)))
    }

    static func decode(_ r: ConsumerRecord) -> IdempotencyRecord? {
        guard let value = r.value else { return nil }
        return try? JSONDecoder().decode(IdempotencyRecord.self, from: Data(value))
    }

    /// Reads the topic to its end into `window`; returns where following it goes on.
    public func load(into window: IdempotencyWindow) async throws -> Int64 {
        var next: Int64 = 0
        try await TopicReader(kafka: kafka).readTopic(topic) { batch in
            for r in batch {
                next = max(next, r.offset + 1)
                if let record = Self.decode(r) { Self.absorb(record, into: window) }
            }
        }
        return next
    }

    /// Follows the topic from `offset` until cancelled, taking what the other replicas write;
    /// `read` hears the next offset it will read after each record.
    func follow(from offset: Int64, into window: IdempotencyWindow, read: @escaping @Sendable (Int64) -> Void, logger: Logger) async {
        do {
            var configuration = ConsumerConfiguration(kafka: kafka, groupID: "ingest-idempotency-\(UUID().uuidString)")
            configuration.autoCommit = false
            configuration.fetchMaxWait = .milliseconds(20)
            let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
            try await consumer.assign([TopicPartitionOffset(topic, 0, offset: offset)])
            await withTaskCancellationHandler {
                do {
                    for try await event in consumer {
                        guard case .records(let batch) = event else { continue }
                        for r in batch {
                            if let record = Self.decode(r) { Self.absorb(record, into: window) }
                            read(r.offset + 1)
                        }
                    }
                } catch {
                    logger.warning("following the idempotency topic stopped: \(error)", metadata: ["topic": "\(topic)"])
                }
            } onCancel: {
                Task { try? await consumer.close(deadline: .seconds(2)) }
            }
        } catch {
            logger.warning("cannot follow the idempotency topic: \(error)", metadata: ["topic": "\(topic)"])
        }
    }

    static func absorb(_ record: IdempotencyRecord, into window: IdempotencyWindow) {
        let left = record.expiresAt - Int64(Date().timeIntervalSince1970 * 1000)
        window.absorb(record, expiresIn: .milliseconds(left))
    }
}

/// A running service's side of the shared keys: loaded before serving, followed, and caught up
/// with before a key this replica has not seen is taken as new, so that a retry sent to it right
/// after another replica answered finds that answer.
final class SharedIdempotency: Sendable {
    let topic: IdempotencyTopic
    let window: IdempotencyWindow
    let logger: Logger
    private final class Position: Sendable { let next = Atomic<Int64>(0) }
    private let position = Position()
    private let admin: KafkaAdmin
    private let follower = Mutex<Task<Void, Never>?>(nil)

    init(topic: IdempotencyTopic, window: IdempotencyWindow, logger: Logger) throws {
        self.topic = topic
        self.window = window
        self.logger = logger
        self.admin = try KafkaAdmin(configuration: topic.kafka, timeout: .seconds(5))
    }

    /// Reads what is shared, then follows it.
    func start() async throws {
        try await topic.ensure()
        let next = try await topic.load(into: window)
        position.next.store(next, ordering: .releasing)
        logger.info("idempotency keys loaded", metadata: ["topic": "\(topic.topic)", "keys": "\(window.count)"])
        let (topic, window, position, logger) = (self.topic, self.window, self.position, self.logger)
        follower.withLock {
            $0 = Task { await topic.follow(from: next, into: window, read: { position.next.store($0, ordering: .releasing) }, logger: logger) }
        }
    }

    /// Waits (up to `limit`) until the follower has read everything written to the topic so far.
    func catchUp(limit: Duration = .seconds(2)) async {
        guard let end = try? await admin.watermarks(TopicPartition(topic.topic, 0)).high else { return }
        let giveUp = ContinuousClock.now + limit
        while position.next.load(ordering: .acquiring) < end, ContinuousClock.now < giveUp {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    func stop() async {
        follower.withLock { $0?.cancel() }
        await admin.close()
    }
}
