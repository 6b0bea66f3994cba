import Foundation
import Kafka
import Logging
import Operations

/// Where the console keeps its lag history across restarts: a compacted topic it owns
/// (`--history-topic`, one partition), one record per series (a stage, or a stage's partition)
/// holding all of that series' tiers. A topic rather than a local file or SQLite, so that a
/// console moved to another host (a rescheduled pod) finds its history, and nothing is added
/// to deploy but a topic. Compaction keeps one record per series: the topic is bounded by the
/// number of series (at most about 40 KB of JSON each), like the memory.
public struct HistoryTopic: Sendable {
    public var topic: String
    public var kafka: KafkaConfiguration

    public init(topic: String, kafka: KafkaConfiguration) {
        self.topic = topic
        self.kafka = kafka
    }

    public func ensure() async throws {
        try await KafkaAdmin.ensureTopic(TopicSpec(name: topic, partitions: 1, cleanupPolicy: .compact), configuration: kafka)
    }

    /// The history as last saved; series whose stage is not in `stages` are left out.
    public func load(stages: Set<String>) async throws -> LagHistory {
        var history = LagHistory()
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        let decoder = JSONDecoder()
        try await reader.readTopic(topic) { batch in
            for record in batch {
                guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }), stages.contains(String(key.prefix { $0 != "/" })),
                    let value = record.value, let tiers = try? decoder.decode([[LagHistory.Point]].self, from: Data(value))
                else { continue }
                history.restore(key, tiers: tiers)
            }
        }
        return history
    }

    /// Writes every series of `history`.
    public func save(_ history: LagHistory, with producer: KafkaProducer) async throws {
        let encoder = JSONEncoder()
        let records = try history.keys.sorted().compactMap { key -> ProducerRecord? in
            guard let tiers = history.snapshot(key) else { return nil }
            return ProducerRecord(topic: topic, partition: 0, key: Array(key.utf8), value: Array(try encoder.encode(tiers)))
        }
        let reports = try await producer.send(records)
        if let error = reports.first(where: { $0.error != nil })?.error { throw error }
    }
}
