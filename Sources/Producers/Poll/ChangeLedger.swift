import Foundation
import Kafka
import Logging
import Operations

/// What a poller last produced for each key: the content hash of the record. Pure; the poller
/// keeps it in memory and persists every change to its state topic (``LedgerTopic``).
public struct ChangeLedger: Sendable, Equatable {
    public private(set) var hashes: [String: UInt64]

    public init(hashes: [String: UInt64] = [:]) {
        self.hashes = hashes
    }

    /// The items whose content differs from what was last produced for their key (new keys
    /// included), in listing order; a key listed twice in one poll (an item that moved between
    /// pages while they were read) counts once, its first listing.
    public func changes(in items: [ListItem]) -> (changed: [ListItem], duplicates: Int) {
        var seen = Set<String>()
        var changed: [ListItem] = []
        var duplicates = 0
        for item in items {
            guard seen.insert(item.key).inserted else {
                duplicates += 1
                continue
            }
            if hashes[item.key] != item.hash { changed.append(item) }
        }
        return (changed, duplicates)
    }

    /// Keys produced before that a complete listing no longer has, sorted.
    public func vanished(listed: Set<String>) -> [String] {
        hashes.keys.filter { !listed.contains($0) }.sorted()
    }

    public mutating func produced(_ key: String, hash: UInt64) { hashes[key] = hash }
    public mutating func deleted(_ key: String) { hashes[key] = nil }
}

/// The ledger's durable copy: a compacted topic, key = record key, value = the hash as 16 hex
/// digits, a tombstone for a key whose record was deleted. A topic rather than a local file, so
/// a poller moved to another host (a rescheduled pod) still knows what it produced.
public struct LedgerTopic: Sendable {
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

    /// Reads the topic to its end: the last value per key wins.
    public func load() async throws -> ChangeLedger {
        var ledger = ChangeLedger()
        try await TopicReader(kafka: kafka).readTopic(topic) { batch in
            for record in batch {
                guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }) else { continue }
                if let value = record.value, let hash = UInt64(String(decoding: value, as: UTF8.self), radix: 16) {
                    ledger.produced(key, hash: hash)
                } else {
                    ledger.deleted(key)
                }
            }
        }
        return ledger
    }

    /// The records that persist these changes (hash nil: deleted).
    public func records(_ changes: [(key: String, hash: UInt64?)]) -> [ProducerRecord] {
        changes.map { change in
            ProducerRecord(topic: topic, key: Array(change.key.utf8), value: change.hash.map { Array(ContentHash.hex($0).utf8) })
        }
    }
}
