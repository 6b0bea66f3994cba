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
            // The committed offset and the watermarks come from the broker: held at Int64's ends, never a trap.
            case .shift(let n): raw = NumberBounds.saturatingAdd(current ?? w.low, n)
            case .offset(let o): raw = o
            }
            return OffsetResetPlan(topic: tp.topic, partition: tp.partition, current: current, target: min(max(raw, w.low), w.high))
        }
    }
}

/// A reset as the operator reviews it before it runs: the plan per partition, what it re-reads
/// or skips with the time span of those records, and whether the group may be reset now.
/// `pipelinectl groups reset-offsets` and the console both prepare and execute it.
public struct PreparedOffsetReset: Sendable {
    public var group: String
    public var topic: String
    public var plan: [OffsetResetPlan]
    /// The group's members by client id; a reset is refused while there are any.
    public var members: [String]
    /// Timestamps (epoch ms) of the first and the last record a partition's move re-reads or skips.
    public var timestamps: [TopicPartition: (first: Int64?, last: Int64?)]
    /// For a reset to a time: partitions where the broker's lookup landed on a record older than
    /// that time (a lookup by batch, as tansu's: the proposal re-reads up to a batch more than
    /// asked), with the found record's timestamp.
    public var coarse: [TopicPartition: Int64] = [:]

    /// What to tell the operator about ``coarse``; nil when the lookup was exact.
    public var coarseNote: String? {
        guard !coarse.isEmpty else { return nil }
        let list = coarse.keys.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }.map { "\($0.partition)" }.joined(separator: ", ")
        return "the broker's time lookup is coarse: on partition\(coarse.count == 1 ? "" : "s") \(list) it found a record older than the time "
            + "asked (it looks up by batch), so this proposal re-reads up to a batch of records before that time"
    }

    /// Records between the current and the target offset: positive to re-read, negative skipped.
    public static func records(_ p: OffsetResetPlan) -> Int64? { p.current.map { $0 - p.target } }

    /// Reads what the plan needs (the committed offsets, the low watermark from ListOffsets and
    /// the log end from a fetch, right on tansu too; for `.time` the offsets for that time) and
    /// the timestamps at both ends of each move.
    public static func prepare(
        group: String, topic: String, partitions: [Int32], target: OffsetResetTarget, admin: KafkaAdmin, kafka: KafkaConfiguration
    ) async throws -> PreparedOffsetReset {
        let all = try await admin.partitions(of: topic)
        let chosen = all.filter { partitions.isEmpty || partitions.contains($0.partition) }
        let members = (try? await admin.describeGroup(group))?.members.map { $0.clientID.isEmpty ? $0.memberID : $0.clientID } ?? []
        let committed = Dictionary(try await admin.committedOffsets(group: group, partitions: chosen).map { ($0.topicPartition, $0.offset) },
                                   uniquingKeysWith: { a, _ in a })
        let probe = LagProbe(reader: TopicReader(kafka: kafka))
        let ends = try await probe.probe(chosen.map { TopicPartitionOffset($0.topic, $0.partition, offset: TopicPartitionOffset.beginning) })
        var watermarks: [TopicPartition: Watermarks] = [:]
        for tp in chosen {
            let low = (try? await admin.watermarks(tp).low) ?? 0
            watermarks[tp] = Watermarks(low: low, high: ends[tp]?.logEnd ?? low)
        }
        var timeOffsets: [TopicPartition: Int64] = [:]
        if case .time(let ms) = target {
            for o in try await admin.offsetsForTimes(chosen, timestamp: ms) { timeOffsets[o.topicPartition] = o.offset }
        }
        let plan = OffsetReset.plan(target: target, partitions: chosen, committed: committed, watermarks: watermarks, timeOffsets: timeOffsets)
        // The first and the last record each move re-reads (target ..< current) or skips (current ..< target).
        var timestamps: [TopicPartition: (first: Int64?, last: Int64?)] = [:]
        let moving = plan.compactMap { p -> (OffsetResetPlan, Range<Int64>)? in
            guard let current = p.current, current != p.target else { return nil }
            return (p, min(current, p.target)..<max(current, p.target))
        }
        let first = try await probe.probe(moving.map { TopicPartitionOffset($0.0.topic, $0.0.partition, offset: $0.1.lowerBound) })
        let last = try await probe.probe(moving.map { TopicPartitionOffset($0.0.topic, $0.0.partition, offset: $0.1.upperBound - 1) })
        for (p, _) in moving { timestamps[p.topicPartition] = (first[p.topicPartition]?.timestamp, last[p.topicPartition]?.timestamp) }
        var prepared = PreparedOffsetReset(group: group, topic: topic, plan: plan, members: members, timestamps: timestamps)
        if case .time(let ms) = target {
            // The record the lookup found must be at or after the time; an older one means the
            // broker answered with the start of the batch that holds the time.
            let found = timeOffsets.filter { $0.value >= 0 }
            let records = try await probe.probe(found.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) })
            for (tp, _) in found {
                if let ts = records[tp]?.timestamp, ts < ms { prepared.coarse[tp] = ts }
            }
        }
        return prepared
    }

    /// Why a reset did not run.
    public enum Refusal: Error, CustomStringConvertible {
        case hasMembers(group: String, members: [String])
        /// The broker refused the commit because the group is active (tansu lists no members of an active group).
        case active(group: String, message: String)

        public var description: String {
            switch self {
            case let .hasMembers(group, members): "group \(group) has \(members.count) members (\(members.joined(separator: ", "))): stop them first, then run this again"
            case let .active(group, message): "group \(group) is active (the broker refused the commit: \(message)): stop its members first, then run this again"
            }
        }
    }

    /// Commits the planned offsets, unless the group has members.
    public func execute(admin: KafkaAdmin) async throws {
        guard members.isEmpty else { throw Refusal.hasMembers(group: group, members: members) }
        do {
            try await admin.alterCommittedOffsets(group: group, offsets: plan.map { TopicPartitionOffset($0.topic, $0.partition, offset: $0.target) })
        } catch {
            // ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, NON_EMPTY_GROUP.
            guard [22, 25, 27, 68].contains(error.rdKafkaCode ?? 0) else { throw error }
            throw Refusal.active(group: group, message: error.message)
        }
    }
}
