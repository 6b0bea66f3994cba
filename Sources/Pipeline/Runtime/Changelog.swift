import Foundation
import Workers
import Kafka

/// A stateful stage's changelog: a compacted topic holding, per lane (an input partition, or the
/// same partition of each joined input topic), the latest checkpoint of the stage state and the
/// input offsets it covers.
///
/// Record key `topic/partition` (the lane: `prices.raw/3`, or `products.raw+thumbnails.ready/3`),
/// value the state as JSON, header `checkpoint.offsets`: `topic/partition=offset` per input
/// partition, comma-separated, each the next input offset after the inputs folded into the
/// state. Written to changelog partition `partition mod changelog partitions`, so a restore reads
/// one partition.
struct Changelog: Sendable {
    static let offsetsHeader = "checkpoint.offsets"
    /// Before joins: the one input partition's offset (`key` is that partition). Still read, so
    /// an upgrade keeps the states checkpointed before it.
    static let legacyOffsetHeader = "checkpoint.offset"

    let topic: String
    let partitions: Int

    func partition(for lane: TopicPartition) -> Int32 { Int32(Int(lane.partition) % max(1, partitions)) }

    static func key(_ lane: TopicPartition) -> [UInt8] { Array("\(lane.topic)/\(lane.partition)".utf8) }

    func record(state: any Encodable, offsets: [TopicPartitionOffset], for lane: TopicPartition) throws -> ProducerRecord {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let value = try encoder.encode(state)
        let header = offsets.map { "\($0.topic)/\($0.partition)=\($0.offset)" }.joined(separator: ",")
        return ProducerRecord(
            topic: topic, partition: partition(for: lane), key: Self.key(lane), value: Array(value),
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
    /// decodes the latest checkpoint of each.
    func restore(_ lanes: [TopicPartition], stateType: any Decodable.Type, using reader: KafkaConsumer) async throws -> [TopicPartition: Checkpoint] {
        let wanted = Dictionary(uniqueKeysWithValues: lanes.map { (Self.key($0), $0) })
        let changelogPartitions = Set(lanes.map { partition(for: $0) })
        try reader.assign(changelogPartitions.map { TopicPartitionOffset(topic, $0, offset: TopicPartitionOffset.beginning) })
        defer { try? reader.assign([]) }
        var latest: [TopicPartition: ConsumerRecord] = [:]
        var open = changelogPartitions
        var events = reader.makeAsyncIterator()
        while !open.isEmpty, let event = try await events.next() {
            switch event {
            case .records(let batch):
                for r in batch {
                    guard let key = r.key, let lane = wanted[key] else { continue }
                    latest[lane] = r
                }
            case .endOfPartition(let end):
                if end.topic == topic { open.remove(end.partition) }
            case .assigned, .revoked:
                break
            }
        }
        var out: [TopicPartition: Checkpoint] = [:]
        for (lane, record) in latest {
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
