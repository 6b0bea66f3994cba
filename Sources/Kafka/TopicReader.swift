import Deadlines
import Foundation
import Logging

/// Reads partitions from given offsets up to their end as of the read, without joining or
/// committing for any group (manual assignment, auto-commit off, nothing stored).
///
/// The end of each partition comes from the fetch response (librdkafka's end-of-partition
/// event carries the fetch's high watermark), which is right on every broker, tansu included.
public struct TopicReader: Sendable {
    public var bootstrapServers: [String]
    public var kafka: KafkaConfiguration
    /// Gives up when nothing arrives for this long.
    public var idleTimeout: Duration = .seconds(15)
    /// How long the broker may hold a fetch that finds nothing (`fetch.wait.max.ms`; nil:
    /// librdkafka's 500 ms). A page that reads a few records sets it short, so that its read
    /// does not end half a second after the last record.
    public var fetchMaxWait: Duration?

    public init(kafka: KafkaConfiguration) {
        self.kafka = kafka
        self.bootstrapServers = kafka.bootstrapServers
    }

    /// A consumer that never joins a group: `group.id` is required by librdkafka, so it gets a
    /// name no group uses, and it never subscribes, stores or commits.
    public func makeConsumer() throws(KafkaError) -> KafkaConsumer {
        var config = ConsumerConfiguration(kafka: kafka, groupID: "pipelinectl-reader-\(UUID().uuidString.prefix(8))")
        config.autoCommit = false
        config.reportEndOfPartition = true
        config.autoOffsetReset = .earliest
        config.fetchMaxWait = fetchMaxWait
        return try KafkaConsumer(configuration: config, logger: Logger(label: "pipelinectl.reader"))
    }

    /// Reads every partition of `topic` from its beginning to its end as of the read (a topic a
    /// service owns: the poll ledger, the console's history and redrive log, the workers' status
    /// topic), batch by batch. With `orNothing`, a topic whose partitions cannot be listed (not
    /// created yet) reads as empty instead of throwing.
    public func readTopic(_ topic: String, orNothing: Bool = false, _ body: ([ConsumerRecord]) async throws -> Void) async throws {
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        let partitions: [TopicPartition]
        do {
            partitions = try await admin.partitions(of: topic)
        } catch {
            await admin.close()
            if orNothing { return }
            throw error
        }
        await admin.close()
        try await read(from: partitions.map { TopicPartitionOffset($0.topic, $0.partition, offset: TopicPartitionOffset.beginning) }) { batch in
            try await body(batch)
            return true
        }
    }

    /// Reads every record from `start` (per partition; ``TopicPartitionOffset/beginning`` allowed)
    /// until each partition reaches its end (or `stop` offset when given: exclusive), handing
    /// batches to `body`. `body` returns false to stop early.
    public func read(
        from start: [TopicPartitionOffset], until stop: [TopicPartition: Int64] = [:],
        _ body: ([ConsumerRecord]) async throws -> Bool
    ) async throws {
        guard !start.isEmpty else { return }
        let consumer = try makeConsumer()
        do {
            try await read(consumer, from: start, until: stop, body)
        } catch {
            try? await consumer.close(deadline: .seconds(5))
            throw error
        }
        try? await consumer.close(deadline: .seconds(5))
    }

    private func read(
        _ consumer: KafkaConsumer, from start: [TopicPartitionOffset], until stop: [TopicPartition: Int64],
        _ body: ([ConsumerRecord]) async throws -> Bool
    ) async throws {
        var remaining = Set(start.map(\.topicPartition))
        // A partition whose start is already at its stop offset has nothing to read.
        for s in start where s.offset >= 0 && stop[s.topicPartition].map({ s.offset >= $0 }) == true { remaining.remove(s.topicPartition) }
        guard !remaining.isEmpty else { return }
        try await consumer.assign(start.filter { remaining.contains($0.topicPartition) })
        while !remaining.isEmpty {
            let event = try await Self.next(consumer, within: idleTimeout)
            switch event {
            case .records(let batch):
                var keep: [ConsumerRecord] = []
                keep.reserveCapacity(batch.count)
                for r in batch where remaining.contains(r.topicPartition) {
                    if let end = stop[r.topicPartition], r.offset >= end {
                        remaining.remove(r.topicPartition)
                        continue
                    }
                    keep.append(r)
                    // (Offsets come from the broker: the next one is computed without trapping.)
                    if let end = stop[r.topicPartition], r.offset.addingReportingOverflow(1).overflow || r.offset + 1 >= end {
                        remaining.remove(r.topicPartition)
                    }
                }
                if !keep.isEmpty, try await !body(keep) { return }
            case .endOfPartition(let end):
                remaining.remove(end.topicPartition)
            case .assigned, .revoked, .lost:
                break
            case nil:
                throw KafkaError.timedOut("reading \(remaining.sorted { $0.description < $1.description }.map(\.description).joined(separator: ", ")): nothing arrived for \(idleTimeout)")
            }
        }
    }

    /// The next event, or nil after `timeout` without one.
    /// (The iterator holds nothing but the consumer, so a fresh one per call is the same one.)
    public static func next(_ consumer: KafkaConsumer, within timeout: Duration) async throws -> ConsumerEvent? {
        let outcome = await Deadline.race(timeout) { () -> Result<ConsumerEvent?, KafkaError> in
            var it = consumer.makeAsyncIterator()
            do throws(KafkaError) { return .success(try await it.next()) } catch { return .failure(error) }
        }
        switch outcome {
        case .none: return nil
        case .some(.success(let event)): return event
        case .some(.failure(let error)): throw error
        }
    }
}
