import Foundation
import Workers

/// A stateful stage's changelog: a compacted topic holding, per input partition, the latest
/// checkpoint of the stage state and the input offset it covers.
///
/// Record key `topic/partition` (the input partition), value the state as JSON, header
/// `checkpoint.offset` the next input offset after the inputs folded into it. Written to changelog
/// partition `input partition mod changelog partitions`, so a restore reads one partition.
struct Changelog: Sendable {
    static let offsetHeader = "checkpoint.offset"

    let topic: String
    let partitions: Int

    func partition(for tp: TopicPartition) -> Int32 { Int32(Int(tp.partition) % max(1, partitions)) }

    static func key(_ tp: TopicPartition) -> [UInt8] { Array("\(tp.topic)/\(tp.partition)".utf8) }

    func record(state: any Encodable, offset: Int64, for tp: TopicPartition) throws -> ProducerRecord {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let value = try encoder.encode(state)
        return ProducerRecord(
            topic: topic, partition: partition(for: tp), key: Self.key(tp), value: Array(value),
            headers: [KafkaHeader(key: Self.offsetHeader, string: String(offset))])
    }

    struct Checkpoint {
        var state: any Decodable
        var offset: Int64
    }

    /// Reads the changelog partitions of these input partitions to their end (without joining a
    /// group) and decodes the latest checkpoint of each.
    func restore(_ inputs: [TopicPartition], stateType: any Decodable.Type, using reader: KafkaConsumer) async throws -> [TopicPartition: Checkpoint] {
        let wanted = Dictionary(uniqueKeysWithValues: inputs.map { (Self.key($0), $0) })
        let changelogPartitions = Set(inputs.map { partition(for: $0) })
        try reader.assign(changelogPartitions.map { TopicPartitionOffset(topic, $0, offset: TopicPartitionOffset.beginning) })
        defer { try? reader.assign([]) }
        var latest: [TopicPartition: ConsumerRecord] = [:]
        var open = changelogPartitions
        var events = reader.makeAsyncIterator()
        while !open.isEmpty, let event = try await events.next() {
            switch event {
            case .records(let batch):
                for r in batch {
                    guard let key = r.key, let tp = wanted[key] else { continue }
                    latest[tp] = r
                }
            case .endOfPartition(let end):
                if end.topic == topic { open.remove(end.partition) }
            case .assigned, .revoked:
                break
            }
        }
        var out: [TopicPartition: Checkpoint] = [:]
        for (tp, record) in latest {
            guard let value = record.value,
                let offsetText = record.header(Self.offsetHeader).map({ String(decoding: $0, as: UTF8.self) }),
                let offset = Int64(offsetText)
            else { continue }
            let state = try JSONDecoder().decode(stateType, from: Data(value))
            out[tp] = Checkpoint(state: state, offset: offset)
        }
        return out
    }
}
