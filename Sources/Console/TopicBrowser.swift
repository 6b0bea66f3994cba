import Foundation
import Kafka
import Operations

/// What the topic page shows: which partition (all when nil), and which records (an exact key,
/// text the value contains), how many at most.
public struct TopicFilter: Sendable, Hashable {
    public var partition: Int32?
    public var key: String?
    public var contains: String?
    public var limit: Int

    public static let limits: ClosedRange<Int64> = 1...500
    public static let defaultLimit = 50

    public init(partition: Int32? = nil, key: String? = nil, contains: String? = nil, limit: Int = TopicFilter.defaultLimit) {
        self.partition = partition
        self.key = key
        self.contains = contains
        self.limit = limit
    }

    /// From the query (`partition`, `key`, `contains`, `limit`); an empty field is no filter, a
    /// number out of range a 400 naming it.
    init(query: [String: String]) throws(BadParameter) {
        func given(_ name: String) -> String? { query[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let text = given("partition") {
            partition = Int32(try RequestParameters.number(text, name: "partition", NumberBounds.partition, what: "a partition"))
        }
        key = given("key")
        contains = given("contains")
        if let text = given("limit") {
            limit = Int(try RequestParameters.number(text, name: "limit", Self.limits, what: "a number of records from 1 to 500"))
        } else {
            limit = Self.defaultLimit
        }
    }

    /// The query string that gives this filter back (for links and the live tail).
    var query: String {
        var parts: [String] = []
        if let partition { parts.append("partition=\(partition)") }
        if let key { parts.append("key=\(HTML.query(key))") }
        if let contains { parts.append("contains=\(HTML.query(contains))") }
        if limit != Self.defaultLimit { parts.append("limit=\(limit)") }
        return parts.joined(separator: "&")
    }

    func matches(_ r: ConsumerRecord) -> Bool {
        if let partition, r.partition != partition { return false }
        if let key, r.key != Array(key.utf8) { return false }
        if let contains {
            guard let value = r.value else { return false }
            return String(decoding: value, as: UTF8.self).contains(contains)
        }
        return true
    }
}

/// Where the live tail goes on from: per partition, the next offset to read.
public struct TailPosition: Sendable, Hashable {
    public var next: [Int32: Int64]

    /// `0:15,1:3`; a partition or offset out of range is a 400 naming it.
    init(text: String) throws(BadParameter) {
        var next: [Int32: Int64] = [:]
        for part in text.split(separator: ",") {
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard pieces.count == 2 else { throw BadParameter(name: "after", reason: "'\(part)' is not PARTITION:OFFSET") }
            let p = Int32(try RequestParameters.number(pieces[0], name: "after", NumberBounds.partition, what: "a partition"))
            next[p] = try RequestParameters.number(pieces[1], name: "after", NumberBounds.offset, what: "an offset")
        }
        self.next = next
    }

    init(next: [Int32: Int64]) { self.next = next }

    var text: String { next.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",") }
}

/// What the topic page read: the newest matches, newest first; how many records were looked
/// at; and where a live tail goes on from.
public struct BrowsedRecords: Sendable {
    public var records: [ConsumerRecord]
    public var scanned: Int
    public var matched: Int
    public var after: TailPosition
}

/// Reads any topic without joining a group: the newest records of each partition (at most
/// `scanPerPartition` looked at), or everything after a tail position.
public struct TopicBrowser: Sendable {
    public var kafka: KafkaConfiguration
    public var scanPerPartition: Int64

    public init(kafka: KafkaConfiguration, scanPerPartition: Int64 = 10_000) {
        self.kafka = kafka
        self.scanPerPartition = scanPerPartition
    }

    public struct NoSuchTopic: Error, Sendable { public var topic: String }

    /// The partitions of `topic`, or NoSuchTopic (checked from every topic's metadata: asking
    /// for the one topic could make a broker create it).
    func partitions(_ topic: String, admin: KafkaAdmin) async throws -> [TopicPartition] {
        guard try await admin.topicExists(topic) else { throw NoSuchTopic(topic: topic) }
        return try await admin.partitions(of: topic)
    }

    /// The low and high marks of `topic`'s partitions (only `partition` when given).
    func watermarks(_ topic: String, partition: Int32?) async throws -> [(TopicPartition, Watermarks)] {
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        do {
            var marks: [(TopicPartition, Watermarks)] = []
            for tp in try await partitions(topic, admin: admin) where partition.map({ $0 == tp.partition }) ?? true {
                marks.append((tp, try await admin.watermarks(tp)))
            }
            await admin.close()
            return marks
        } catch {
            await admin.close()
            throw error
        }
    }

    /// A reader for a page's few records: the broker does not hold its last, empty fetch for
    /// librdkafka's 500 ms.
    var reader: TopicReader {
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        reader.fetchMaxWait = .milliseconds(20)
        return reader
    }

    /// The newest records that match, newest first.
    public func newest(_ topic: String, filter: TopicFilter) async throws -> BrowsedRecords {
        var start: [TopicPartitionOffset] = []
        var after: [Int32: Int64] = [:]
        for (tp, marks) in try await watermarks(topic, partition: filter.partition) {
            after[tp.partition] = marks.high
            guard marks.high > marks.low else { continue }
            // The high mark only places the start (tansu's is low for multi-record
            // batches); the read goes to the end the fetches report.
            start.append(TopicPartitionOffset(topic, tp.partition, offset: max(marks.low, NumberBounds.saturatingSubtract(marks.high, scanPerPartition))))
        }
        var found: [ConsumerRecord] = []
        var scanned = 0, matched = 0
        try await reader.read(from: start) { batch in
            for r in batch {
                scanned += 1
                after[r.partition] = max(after[r.partition] ?? 0, NumberBounds.saturatingAdd(r.offset, 1))
                guard filter.matches(r) else { continue }
                matched += 1
                found.append(r)
            }
            if found.count > 2 * filter.limit {
                found.sort(by: Self.newestFirst)
                found.removeLast(found.count - filter.limit)
            }
            return true
        }
        found.sort(by: Self.newestFirst)
        return BrowsedRecords(records: Array(found.prefix(filter.limit)), scanned: scanned, matched: matched, after: TailPosition(next: after))
    }

    /// The records after `position` that match, oldest first, at most `filter.limit` (the next
    /// call goes on from the returned position). A partition the position does not name starts
    /// at its end.
    public func tail(_ topic: String, after position: TailPosition, filter: TopicFilter) async throws -> BrowsedRecords {
        var start: [TopicPartitionOffset] = []
        var next = position.next
        for (tp, marks) in try await watermarks(topic, partition: filter.partition) {
            let from = max(next[tp.partition] ?? marks.high, marks.low)
            next[tp.partition] = from
            start.append(TopicPartitionOffset(topic, tp.partition, offset: from))
        }
        var found: [ConsumerRecord] = []
        var scanned = 0, matched = 0
        // A tail is polled again in a moment: what arrives within 2 s is its answer. A position
        // past a partition's end (a hand-made `after`) never gets an end-of-partition event, and
        // without this held a consumer for the reader's 10 s and then failed (500); now it is an
        // answer with nothing new.
        var tailReader = reader
        tailReader.idleTimeout = .seconds(2)
        do {
            try await read(tailReader, from: start, found: &found, scanned: &scanned, matched: &matched, next: &next, filter: filter)
        } catch let error as KafkaError where error.code == .timedOut {}
        found.sort { ($0.timestamp ?? 0, $0.partition, $0.offset) < ($1.timestamp ?? 0, $1.partition, $1.offset) }
        return BrowsedRecords(records: found, scanned: scanned, matched: matched, after: TailPosition(next: next))
    }

    private func read(
        _ reader: TopicReader, from start: [TopicPartitionOffset], found: inout [ConsumerRecord], scanned: inout Int, matched: inout Int,
        next: inout [Int32: Int64], filter: TopicFilter
    ) async throws {
        try await reader.read(from: start) { batch in
            for r in batch {
                // Past the limit: the rest of the batch waits for the next call.
                guard found.count < filter.limit else { return false }
                scanned += 1
                next[r.partition] = NumberBounds.saturatingAdd(r.offset, 1)
                guard filter.matches(r) else { continue }
                matched += 1
                found.append(r)
            }
            return found.count < filter.limit
        }
    }

    /// One record, or nil when the partition has nothing at that offset.
    public func record(_ topic: String, partition: Int32, offset: Int64) async throws -> ConsumerRecord? {
        guard let marks = try await watermarks(topic, partition: partition).first?.1 else { return nil }
        var found: ConsumerRecord?
        try await reader.read(from: [TopicPartitionOffset(topic, partition, offset: marks.readStart(for: offset))],
                              until: [TopicPartition(topic, partition): NumberBounds.saturatingAdd(offset, 1)]) { batch in
            // The first record at or past the offset decides; one past it (an offset before the
            // log start, reset there; a compacted one) means there is none.
            guard let next = batch.first(where: { $0.offset >= offset }) else { return true }
            found = next.offset == offset ? next : nil
            return false
        }
        return found
    }

    static func newestFirst(_ a: ConsumerRecord, _ b: ConsumerRecord) -> Bool {
        (a.timestamp ?? 0, a.partition, a.offset) > (b.timestamp ?? 0, b.partition, b.offset)
    }
}

extension Watermarks {
    /// Where a read for the record at `offset` starts: there, unless the broker lists no record
    /// that far; then at the last record it lists, so that the read reaches the end the fetch
    /// reports and stops there. (Started past the end, it would wait out the reader's idle
    /// timeout on tansu, which answers such a fetch with nothing: no out-of-range error, no
    /// end of partition. Its listed end is low for multi-record batches, so the last record it
    /// lists exists and the records after it are read too.)
    func readStart(for offset: Int64) -> Int64 {
        offset < high ? offset : max(low, high - 1)
    }
}
