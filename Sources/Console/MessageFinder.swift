import Foundation
import Kafka
import Operations
import Workers

/// What the operator looks for on the Find page: in one topic, by key, by header, at an
/// offset, or the first records at or after a time.
public enum MessageQuery: Sendable, Hashable {
    case key(String)
    case header(name: String, value: String)
    case offset(partition: Int32, offset: Int64)
    case time(Int64)

    /// From the form: `by` (key, header, offset, time) and `value` (`name=value` for a header,
    /// `PARTITION:OFFSET` for an offset, ISO-8601 or epoch ms for a time). Throws the reason.
    public init(by: String, value: String) throws(MessageQueryError) {
        switch by {
        case "key":
            self = .key(value)
        case "header":
            let parts = value.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty else { throw MessageQueryError(reason: "'\(value)' is not NAME=VALUE") }
            self = .header(name: parts[0], value: parts[1])
        case "offset":
            let parts = value.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2 else { throw MessageQueryError(reason: "'\(value)' is not PARTITION:OFFSET (e.g. 2:1500)") }
            do {
                let p = try NumberBounds.parse(parts[0], NumberBounds.partition, what: "a partition")
                let o = try NumberBounds.parse(parts[1], NumberBounds.offset, what: "an offset")
                self = .offset(partition: Int32(p), offset: o)
            } catch {
                throw MessageQueryError(reason: "'\(value)' is not PARTITION:OFFSET (e.g. 2:1500): \(error)")
            }
        case "time":
            do { self = .time(try RequestParameters.time(value, name: "value")) } catch { throw MessageQueryError(reason: error.reason) }
        default:
            throw MessageQueryError(reason: "no search by '\(by)'; by key, header, offset or time")
        }
    }

    func matches(_ r: ConsumerRecord) -> Bool {
        switch self {
        case .key(let key): r.key == Array(key.utf8)
        case .header(let name, let value): r.headers.contains { $0.key == name && $0.value == Array(value.utf8) }
        case .offset(let p, let o): r.partition == p && r.offset == o
        case .time: true
        }
    }
}

public struct MessageQueryError: Error, Sendable, Hashable {
    public var reason: String
}

/// One record found, where it sits, and what became of it: for each stage reading its topic,
/// whether the stage's group has committed past it; whether it is in the dead letters.
public struct FoundMessage: Sendable {
    public var record: ConsumerRecord
    public var stages: [(stage: String, group: String, committed: Int64?)]
    public var deadLetters: [DeadLetterEntry]

    public func consumed(_ committed: Int64?) -> Bool { (committed ?? -1) > record.offset }
}

/// What a search found: the newest `maxResults` matches, newest first, and how many matched in all.
public struct FoundMessages: Sendable {
    public var messages: [FoundMessage]
    public var matched: Int
}

/// Finds records without joining any group: an offset is read directly, a time through
/// OffsetsForTimes, a key or header by scanning the newest `scanPerPartition` records of each
/// partition (a bounded search: the page says how far back it looked). Every match is counted;
/// the newest `maxResults` are shown.
public struct MessageFinder: Sendable {
    public var kafka: KafkaConfiguration
    public var scanPerPartition: Int64
    public var maxResults: Int

    public init(kafka: KafkaConfiguration, scanPerPartition: Int64 = 100_000, maxResults: Int = 50) {
        self.kafka = kafka
        self.scanPerPartition = scanPerPartition
        self.maxResults = maxResults
    }

    public func find(
        _ query: MessageQuery, topic: String, stages: [(stage: String, group: String)], deadLetters: [DeadLetterEntry]
    ) async throws -> FoundMessages {
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        do {
            let (found, matched) = try await records(query, topic: topic, admin: admin)
            var committed: [String: [TopicPartition: Int64]] = [:]
            let partitions = Array(Set(found.map(\.topicPartition)))
            for (_, group) in stages where committed[group] == nil && !partitions.isEmpty {
                committed[group] = Dictionary(try await admin.committedOffsets(group: group, partitions: partitions).map { ($0.topicPartition, $0.offset) },
                                              uniquingKeysWith: { a, _ in a })
            }
            await admin.close()
            let messages = found.map { r in
                FoundMessage(
                    record: r,
                    stages: stages.map { ($0.stage, $0.group, committed[$0.group]?[r.topicPartition].flatMap { $0 >= 0 ? $0 : nil }) },
                    deadLetters: deadLetters.filter { $0.letter.origin.topic == r.topic && $0.letter.origin.partition == r.partition && $0.letter.origin.offset == r.offset })
            }
            return FoundMessages(messages: messages, matched: matched)
        } catch {
            await admin.close()
            throw error
        }
    }

    /// The newest `maxResults` matches, newest first, and the number of all matches.
    private func records(_ query: MessageQuery, topic: String, admin: KafkaAdmin) async throws -> (records: [ConsumerRecord], matched: Int) {
        let partitions = try await admin.partitions(of: topic)
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        var start: [TopicPartitionOffset] = []
        var stop: [TopicPartition: Int64] = [:]
        switch query {
        case .offset(let p, let o):
            guard partitions.contains(TopicPartition(topic, p)) else { return ([], 0) }
            let marks = try await admin.watermarks(TopicPartition(topic, p))
            // A query's offset is at most NumberBounds.offset's end, so the next one exists.
            start = [TopicPartitionOffset(topic, p, offset: marks.readStart(for: o))]
            stop = [TopicPartition(topic, p): NumberBounds.saturatingAdd(o, 1)]
        case .time(let ms):
            for o in try await admin.offsetsForTimes(partitions, timestamp: ms) where o.offset >= 0 {
                start.append(o)
                stop[o.topicPartition] = NumberBounds.saturatingAdd(o.offset, 1)
            }
        case .key, .header:
            for tp in partitions {
                let marks = try await admin.watermarks(tp)
                guard marks.high > marks.low else { continue }
                // ListOffsets' high mark only places the start (too low on tansu for
                // multi-record batches); the scan goes to the end the fetches report.
                start.append(TopicPartitionOffset(topic, tp.partition, offset: max(marks.low, NumberBounds.saturatingSubtract(marks.high, scanPerPartition))))
            }
        }
        func newestFirst(_ a: ConsumerRecord, _ b: ConsumerRecord) -> Bool {
            (a.timestamp ?? 0, a.partition, a.offset) > (b.timestamp ?? 0, b.partition, b.offset)
        }
        // The whole range is read (it is bounded); only the newest matches are kept.
        var found: [ConsumerRecord] = []
        var matched = 0
        try await reader.read(from: start, until: stop) { batch in
            for record in batch where query.matches(record) {
                matched += 1
                found.append(record)
            }
            if found.count > 2 * maxResults {
                found.sort(by: newestFirst)
                found.removeLast(found.count - maxResults)
            }
            return true
        }
        found.sort(by: newestFirst)
        return (Array(found.prefix(maxResults)), matched)
    }
}
