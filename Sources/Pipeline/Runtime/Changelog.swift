import Foundation
import Workers
import Kafka

/// A stateful stage's changelog: a compacted topic holding, per lane (an input partition, or the
/// same partition of each joined input topic), the latest checkpoint of the stage state and the
/// input offsets it covers.
///
/// Record key `stage/topic/partition` (the topology stage and the lane: `prices-candles/prices.raw/3`,
/// or `new-products/products.raw+thumbnails.ready/3`), value the state as JSON, header
/// `checkpoint.offsets`: `topic/partition=offset` per input partition, comma-separated, each the
/// next input offset after the inputs folded into the state. Written to changelog partition
/// `partition mod changelog partitions`, so a restore reads one partition. (The topology lets no
/// two stages share a changelog; the stage in the key keeps them apart all the same.)
///
/// Checkpoints of a lane are written one at a time, each only once every output of the inputs it
/// covers is delivered (``SettlementQueue``), so the last record of a key is its newest state.
struct Changelog: Sendable {
    static let offsetsHeader = "checkpoint.offsets"
    /// Before joins: the one input partition's offset (`key` is that partition). Still read, so
    /// an upgrade keeps the states checkpointed before it.
    static let legacyOffsetHeader = "checkpoint.offset"

    let topic: String
    let partitions: Int
    /// The topology stage whose states these are.
    let stage: String

    func partition(for lane: TopicPartition) -> Int32 { Int32(Int(lane.partition) % max(1, partitions)) }

    func key(_ lane: TopicPartition) -> [UInt8] { Array("\(stage)/\(lane.topic)/\(lane.partition)".utf8) }

    /// The key before the stage was part of it: still read, so an upgrade keeps the states
    /// checkpointed before it (a record with the stage in its key wins).
    static func unscopedKey(_ lane: TopicPartition) -> [UInt8] { Array("\(lane.topic)/\(lane.partition)".utf8) }

    func record(state: any Encodable, offsets: [TopicPartitionOffset], for lane: TopicPartition) throws -> ProducerRecord {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let value = try encoder.encode(state)
        let header = offsets.map { "\($0.topic)/\($0.partition)=\($0.offset)" }.joined(separator: ",")
        return ProducerRecord(
            topic: topic, partition: partition(for: lane), key: key(lane), value: Array(value),
            headers: [KafkaHeader(key: Self.offsetsHeader, string: header)])
    }

    static func offsets(_ header: String) -> [TopicPartition: Int64]? {
        var out: [TopicPartition: Int64] = [:]
        for item in header.split(separator: ",") {
            guard let eq = item.lastIndex(of: "="), let slash = item[..<eq].lastIndex(of: "/"),
                let partition = Int32(item[item.index(after: slash)..<eq]), let offset = Int64(item[item.index(after: eq)...])
            else { return nil }
            out[TopicPartition(String(item[..<slash]), partition)] = offset
        }
        return out.isEmpty ? nil : out
    }

    struct Checkpoint {
        var state: any Decodable
        var offsets: [TopicPartition: Int64]
    }

    /// Reads the changelog partitions of these lanes to their end (without joining a group) and
    /// decodes the latest checkpoint of each. The reader's assignment replaces whatever it held,
    /// events fetched for an earlier restore included.
    func restore(_ lanes: [TopicPartition], stateType: any Decodable.Type, using reader: KafkaConsumer) async throws -> [TopicPartition: Checkpoint] {
        let scoped = Dictionary(uniqueKeysWithValues: lanes.map { (key($0), $0) })
        let unscoped = Dictionary(uniqueKeysWithValues: lanes.map { (Self.unscopedKey($0), $0) })
        let changelogPartitions = Set(lanes.map { partition(for: $0) })
        try await reader.assign(changelogPartitions.map { TopicPartitionOffset(topic, $0, offset: TopicPartitionOffset.beginning) })
        var latest: [TopicPartition: ConsumerRecord] = [:]
        var latestUnscoped: [TopicPartition: ConsumerRecord] = [:]
        var open = changelogPartitions
        var events = reader.makeAsyncIterator()
        while !open.isEmpty, let event = try await events.next() {
            switch event {
            case .records(let batch):
                for r in batch {
                    guard let key = r.key else { continue }
                    if let lane = scoped[key] { latest[lane] = r } else if let lane = unscoped[key] { latestUnscoped[lane] = r }
                }
            case .endOfPartition(let end):
                if end.topic == topic { open.remove(end.partition) }
            case .assigned, .revoked, .lost:
                break
            }
        }
        try await reader.assign([])
        var out: [TopicPartition: Checkpoint] = [:]
        for (lane, record) in latestUnscoped.merging(latest, uniquingKeysWith: { _, scoped in scoped }) {
            let offsets: [TopicPartition: Int64]
            if let header = record.header(Self.offsetsHeader).map({ String(decoding: $0, as: UTF8.self) }), let parsed = Self.offsets(header) {
                offsets = parsed
            } else if let legacy = record.header(Self.legacyOffsetHeader).flatMap({ Int64(String(decoding: $0, as: UTF8.self)) }) {
                offsets = [lane: legacy]
            } else {
                continue
            }
            guard let value = record.value else { continue }
            let state = try JSONDecoder().decode(stateType, from: Data(value))
            out[lane] = Checkpoint(state: state, offsets: offsets)
        }
        return out
    }
}
