import Foundation
import Kafka

/// One partition's lag as observed now.
public struct PartitionLag: Sendable, Hashable, Codable {
    public var topic: String
    public var partition: Int32
    /// The group's committed offset (the next record it will read).
    public var committed: Int64
    /// The log-end offset (high watermark) from a fetch; nil when it could not be read.
    public var logEnd: Int64?
    /// The group has committed nothing here: `committed` is the log start, where the group's
    /// first member will begin.
    public var neverCommitted = false
    /// logEnd - committed, never negative; nil when the log end is unknown.
    public var lagRecords: Int64?
    /// How long ago the log end passed the committed offset (kafka-lag-exporter's lag in time,
    /// interpolated over the observed log ends: ``LogEndLag``, remembered past the window:
    /// ``CommitWindow/lagSeconds(committed:now:)``); 0 when caught up; a lower bound when the log
    /// end was past it in every observation and did not move; nil with one observation.
    public var lagSeconds: Double?
    /// Now minus the timestamp of the first unconsumed record: the record's own time, so replayed
    /// or late records read as far behind; 0 when caught up.
    public var recordAgeSeconds: Double?
    public var status: PartitionLagStatus = .ok
    /// Who owns the partition, if a member does.
    public var owner: String?

    public init(topic: String, partition: Int32, committed: Int64, logEnd: Int64?, firstUnconsumedTimestamp: Int64?, now: Int64) {
        self.topic = topic
        self.partition = partition
        self.committed = committed
        self.logEnd = logEnd
        if let logEnd {
            lagRecords = max(0, logEnd - committed)
            if lagRecords == 0 {
                lagSeconds = 0
                recordAgeSeconds = 0
            } else if let ts = firstUnconsumedTimestamp {
                recordAgeSeconds = max(0, Double(now - ts) / 1000)
            }
        }
    }

    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }
}

/// A group's lag.
public struct GroupLag: Sendable, Hashable, Codable {
    public var group: String
    public var state: String?
    public var members: [ConsumerGroupMember]
    public var partitions: [PartitionLag]
    /// Its worst partition's status.
    public var status: PartitionLagStatus
    public var totalLag: Int64 { partitions.reduce(0) { $0 + ($1.lagRecords ?? 0) } }
    /// The longest lag in time (``PartitionLag/lagSeconds``); nil while a partition with records
    /// waiting has none yet.
    public var maxLagSeconds: Double? {
        if partitions.contains(where: { ($0.lagRecords ?? 0) > 0 && $0.lagSeconds == nil }) { return nil }
        return partitions.compactMap(\.lagSeconds).max() ?? 0
    }
    /// The oldest first unconsumed record's age (``PartitionLag/recordAgeSeconds``).
    public var maxRecordAgeSeconds: Double { partitions.compactMap(\.recordAgeSeconds).max() ?? 0 }

    public init(group: String, state: String?, members: [ConsumerGroupMember], partitions: [PartitionLag], status: PartitionLagStatus) {
        self.group = group
        self.state = state
        self.members = members
        self.partitions = partitions
        self.status = status
    }
}

/// Reads a group's lag from the cluster without joining the group.
///
/// The log-end offset is the high watermark of a fetch, not ListOffsets: tansu answers
/// ListOffsets(latest) with the last batch's base offset plus one, too low whenever that batch
/// holds several records, while every broker (tansu, Apache Kafka, librdkafka's mock cluster)
/// puts the right high watermark in fetch responses. Fetching at the committed offset also
/// gives the first unconsumed record, whose timestamp the lag in seconds needs.
public struct LagProbe: Sendable {
    public var reader: TopicReader

    public init(reader: TopicReader) { self.reader = reader }

    /// Log end (fetch high watermark), the offset of the first record at or after `offset` (the
    /// log end when there is none) and its timestamp, per partition.
    public func probe(_ offsets: [TopicPartitionOffset]) async throws -> [TopicPartition: (logEnd: Int64, first: Int64, timestamp: Int64?)] {
        guard !offsets.isEmpty else { return [:] }
        let consumer = try reader.makeConsumer()
        var result: [TopicPartition: (logEnd: Int64, first: Int64, timestamp: Int64?)] = [:]
        do {
            try await consumer.assign(offsets)
            var remaining = Set(offsets.map(\.topicPartition))
            while !remaining.isEmpty {
                guard let event = try await TopicReader.next(consumer, within: reader.idleTimeout) else {
                    throw KafkaError.timedOut("fetching \(remaining.count) partition(s) for their log end")
                }
                switch event {
                case .records(let batch):
                    for r in batch where remaining.contains(r.topicPartition) {
                        // The first record at or after the committed offset; the watermark of
                        // the fetch that brought it.
                        let high = consumer.cachedHighWatermark(r.topicPartition) ?? (r.offset + 1)
                        result[r.topicPartition] = (max(high, r.offset + 1), r.offset, r.timestamp)
                        remaining.remove(r.topicPartition)
                    }
                case .endOfPartition(let end):
                    if remaining.remove(end.topicPartition) != nil { result[end.topicPartition] = (end.offset, end.offset, nil) }
                case .assigned, .revoked, .lost:
                    break
                }
            }
        } catch {
            try? await consumer.close(deadline: .seconds(5))
            throw error
        }
        try? await consumer.close(deadline: .seconds(5))
        return result
    }

    /// The group's lag now. `windows` holds earlier commits per partition (for the status);
    /// this observation is appended to it. `topics` limits the answer to these topics.
    public func groupLag(
        _ group: String, admin: KafkaAdmin, topics: [String]? = nil, windows: inout [TopicPartition: CommitWindow], windowSize: Int = 10,
        now: () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) async throws -> GroupLag {
        let description = try? await admin.describeGroup(group)
        // With topics named, ask for their partitions; else for everything the group committed
        // (brokers that do not answer that, like librdkafka's mock cluster, are asked for the
        // members' assignment instead).
        var named = Set<TopicPartition>()
        for topic in topics ?? [] {
            named.formUnion(try await admin.partitions(of: topic))
        }
        var committed = topics == nil ? try await admin.committedOffsets(group: group) : []
        if committed.isEmpty {
            if topics == nil { named.formUnion(description?.members.flatMap(\.assignment) ?? []) }
            if !named.isEmpty {
                committed = try await admin.committedOffsets(group: group, partitions: named.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) })
            }
        }
        committed = committed.filter { topics?.contains($0.topic) ?? true }
        // A partition the group never committed is read from where `auto.offset.reset=earliest`
        // (the workers' setting) starts it, the log start: its records wait all the same. The
        // probe reads from offset 0, which the reader's own `earliest` moves to the log start
        // when retention has removed it (no ListOffsets(earliest): brokers differ in it).
        let uncommitted = Set(committed.filter { $0.offset < 0 }.map(\.topicPartition))
        let probed = try await probe(committed.map { $0.offset < 0 ? TopicPartitionOffset($0.topic, $0.partition, offset: 0) : $0 })
        committed = committed.map { c in
            guard c.offset < 0 else { return c }
            return TopicPartitionOffset(c.topic, c.partition, offset: probed[c.topicPartition]?.first ?? 0)
        }
        let t = now()
        var owners: [TopicPartition: String] = [:]
        for m in description?.members ?? [] { for tp in m.assignment { owners[tp] = m.clientID.isEmpty ? m.memberID : m.clientID } }
        // Only a group the broker reports as Empty (or listing members) says who is there: tansu
        // answers DescribeGroups for an active group with state Unknown and no members, and an
        // unanswered describe says nothing either. Unknown membership never makes a STOP.
        let hasMembers = description.map { !$0.members.isEmpty || $0.state != "Empty" } ?? true
        var partitions: [PartitionLag] = []
        for c in committed {
            let p = probed[c.topicPartition]
            var lag = PartitionLag(topic: c.topic, partition: c.partition, committed: c.offset, logEnd: p?.logEnd,
                                   firstUnconsumedTimestamp: p?.timestamp, now: t)
            lag.owner = owners[c.topicPartition]
            lag.neverCommitted = uncommitted.contains(c.topicPartition)
            var window = windows[c.topicPartition] ?? CommitWindow(capacity: windowSize)
            if let end = p?.logEnd { window.append(CommitSample(offset: c.offset, logEnd: end, time: t)) }
            windows[c.topicPartition] = window
            if lag.lagRecords ?? 0 > 0 { lag.lagSeconds = window.lagSeconds(committed: c.offset, now: t) }
            lag.status = LagEvaluator.status(window: window.samples, currentLag: lag.lagRecords, now: t, hasMembers: hasMembers)
            partitions.append(lag)
        }
        partitions.sort { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        return GroupLag(group: group, state: description?.state, members: description?.members ?? [], partitions: partitions,
                        status: PartitionLagStatus(worstOf: partitions.map(\.status)))
    }
}
