import Kafka
/// Where `groups reset-offsets` moves a group's committed offsets.
public enum OffsetResetTarget: Sendable, Hashable {
    case earliest
    case latest
    /// The first record at or after this time (epoch ms).
    case time(Int64)
    /// The committed offset moved by this many records (negative: back).
    case shift(Int64)
    /// This offset on every selected partition.
    case offset(Int64)
}

/// One partition's planned change.
public struct OffsetResetPlan: Sendable, Hashable, Codable {
    public var topic: String
    public var partition: Int32
    /// nil when the group has no committed offset there.
    public var current: Int64?
    public var target: Int64

    public init(topic: String, partition: Int32, current: Int64?, target: Int64) {
        self.topic = topic
        self.partition = partition
        self.current = current
        self.target = target
    }

    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }
}

public enum OffsetReset {
    /// The new offsets, clamped to what the partition holds (`low...logEnd`).
    ///
    /// - Parameters:
    ///   - timeOffsets: for `.time`, the offset `offsetsForTimes` found (-1 when every record
    ///     is older: the log end).
    public static func plan(
        target: OffsetResetTarget, partitions: [TopicPartition], committed: [TopicPartition: Int64],
        watermarks: [TopicPartition: Watermarks], timeOffsets: [TopicPartition: Int64] = [:]
    ) -> [OffsetResetPlan] {
        partitions.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }.compactMap { tp in
            guard let w = watermarks[tp] else { return nil }
            let current = committed[tp].flatMap { $0 >= 0 ? $0 : nil }
            let raw: Int64
            switch target {
            case .earliest: raw = w.low
            case .latest: raw = w.high
            case .time: raw = timeOffsets[tp].flatMap { $0 >= 0 ? $0 : nil } ?? w.high
            case .shift(let n): raw = (current ?? w.low) + n
            case .offset(let o): raw = o
            }
            return OffsetResetPlan(topic: tp.topic, partition: tp.partition, current: current, target: min(max(raw, w.low), w.high))
        }
    }
}
