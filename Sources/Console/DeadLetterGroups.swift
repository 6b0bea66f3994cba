import Foundation
import Kafka
import Operations
import Workers

/// Dead letters grouped as the page lists them: by stage, reason, field and origin topic, with
/// how many and when the first and last were written. Pure over the entries.
public struct DeadLetterGroup: Sendable, Hashable, Codable {
    public var stage: String
    public var reason: String
    public var field: String
    public var originTopic: String
    public var count: Int
    /// Epoch ms (the dead letters' record timestamps).
    public var firstSeen: Int64
    public var lastSeen: Int64
    /// The newest one's place in the dead-letter topic, to open it.
    public var latest: Place

    public struct Place: Sendable, Hashable, Codable {
        public var partition: Int32
        public var offset: Int64
    }

    public static func groups(_ entries: [DeadLetterEntry]) -> [DeadLetterGroup] {
        var groups: [[String]: DeadLetterGroup] = [:]
        for e in entries {
            let key = [e.letter.stage, e.letter.failure.reason.rawValue, e.letter.failure.field, e.letter.origin.topic]
            let time = e.record.timestamp ?? 0
            let place = Place(partition: e.record.partition, offset: e.record.offset)
            if var g = groups[key] {
                g.count += 1
                g.firstSeen = min(g.firstSeen, time)
                if time >= g.lastSeen { g.lastSeen = time; g.latest = place }
                groups[key] = g
            } else {
                groups[key] = DeadLetterGroup(
                    stage: key[0], reason: key[1], field: key[2], originTopic: key[3], count: 1, firstSeen: time, lastSeen: time, latest: place)
            }
        }
        return groups.values.sorted { ($0.count, $1.stage, $1.reason) > ($1.count, $0.stage, $0.reason) }
    }
}

/// The page's filter is the CLI's selection (`pipelinectl dlq --stage --reason --origin-topic
/// --field --key`, and one dead letter: `--topic --partition --offset`), one value each, from the
/// query (`stage`, `reason`, `origin`, `field`, `key`, `letter`, and the original records' time
/// range `since` and `until` as epoch ms: ``withTimesChecked(_:)`` turns what an operator typed
/// into those, or refuses it).
extension DeadLetterSelection {
    public static let queryNames = ["stage", "reason", "origin", "field", "key", "letter", "since", "until"]

    /// `query` with `since` and `until` as epoch ms (given as ISO-8601 or epoch ms); a value that
    /// is neither is refused with its name, never dropped.
    static func withTimesChecked(_ query: [String: String]) throws(BadParameter) -> [String: String] {
        var query = query
        for name in ["since", "until"] {
            guard let text = query[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { continue }
            query[name] = String(try RequestParameters.time(text, name: name))
        }
        // One dead letter by where it sits: a value that names none would select nothing here
        // and, as CLI flags, every dead letter.
        if let letter = query["letter"], !letter.isEmpty {
            guard let slash = letter.lastIndex(of: "/"), let at = letter.lastIndex(of: "@"), slash < at, slash > letter.startIndex,
                  let partition = Int32(letter[letter.index(after: slash)..<at]), partition >= 0,
                  let offset = Int64(letter[letter.index(after: at)...]), offset >= 0 else {
                throw BadParameter(name: "letter", reason: "names no dead letter (expected topic/partition@offset, partition and offset not negative)")
            }
        }
        return query
    }

    public init(query: [String: String]) {
        self.init()
        func set(_ name: String) -> Set<String> { query[name].flatMap { $0.isEmpty ? nil : [$0] } ?? [] }
        stages = set("stage")
        reasons = set("reason")
        originTopics = set("origin")
        fields = set("field")
        keys = set("key")
        letters = set("letter")
        since = query["since"].flatMap { Int64($0) }
        until = query["until"].flatMap { Int64($0) }
    }

    /// The value of one of ``queryNames`` ("" for any).
    public func value(_ name: String) -> String {
        let values: Set<String> = switch name {
        case "stage": stages
        case "reason": reasons
        case "origin": originTopics
        case "key": keys
        case "letter": letters
        case "since": since.map { [String($0)] } ?? []
        case "until": until.map { [String($0)] } ?? []
        default: fields
        }
        return values.first ?? ""
    }

    public var isEverything: Bool { stages.isEmpty && reasons.isEmpty && originTopics.isEmpty && fields.isEmpty && keys.isEmpty && letters.isEmpty && since == nil && until == nil }

    /// The same selection as `pipelinectl dlq` flags.
    public var flags: String {
        // One dead letter: its topic, partition and offset.
        let letter = letters.sorted().first.flatMap { address -> [(String, Set<String>)]? in
            guard let slash = address.lastIndex(of: "/"), let at = address.lastIndex(of: "@"), slash < at else { return nil }
            return [("--topic", [String(address[..<slash])]), ("--partition", [String(address[address.index(after: slash)..<at])]),
                    ("--offset", [String(address[address.index(after: at)...])])]
        } ?? []
        let times: [(String, Set<String>)] = [("--since", since.map { [String($0)] } ?? []), ("--until", until.map { [String($0)] } ?? [])]
        return ([("--stage", stages), ("--reason", reasons), ("--origin-topic", originTopics), ("--field", fields), ("--key", keys)] + letter + times)
            .flatMap { flag, values in values.sorted().map { "\(flag) '\($0.replacingOccurrences(of: "'", with: "'\\''"))'" } }
            .joined(separator: " ")
    }
}

/// Reads the dead-letter topics of the topology (without a group): the newest
/// `maxPerPartition` records of each partition.
public struct DeadLetterReader: Sendable {
    public var kafka: KafkaConfiguration
    public var topics: [String]
    public var maxPerPartition: Int64

    public init(kafka: KafkaConfiguration, topics: [String], maxPerPartition: Int64 = 10_000) {
        self.kafka = kafka
        self.topics = topics
        self.maxPerPartition = maxPerPartition
    }

    /// Every readable dead letter (records that are not dead letters are skipped), oldest first per partition.
    public func read() async throws -> [DeadLetterEntry] {
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        var start: [TopicPartitionOffset] = []
        do {
            for topic in topics {
                for tp in try await admin.partitions(of: topic) {
                    // ListOffsets' high mark can be too low on tansu (multi-record batches): it only
                    // places the start; the read goes to the end the fetches report.
                    let marks = try await admin.watermarks(tp)
                    guard marks.high > marks.low else { continue }
                    start.append(TopicPartitionOffset(tp.topic, tp.partition, offset: max(marks.low, NumberBounds.saturatingSubtract(marks.high, maxPerPartition))))
                }
            }
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
        var entries: [DeadLetterEntry] = []
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        try await reader.read(from: start) { batch in
            entries += batch.compactMap(DeadLetterEntry.init)
            return true
        }
        return entries
    }

    /// The record at `offset` of `partition` of the first dead-letter topic that has it.
    public func entry(partition: Int32, offset: Int64, topic: String) async throws -> DeadLetterEntry? {
        // A partition the topic does not have would only time out.
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        let partitions: [TopicPartition]
        do { partitions = try await admin.partitions(of: topic) } catch {
            await admin.close()
            throw error
        }
        await admin.close()
        let tp = TopicPartition(topic, partition)
        guard partitions.contains(tp) else { return nil }
        var found: DeadLetterEntry?
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        try await reader.read(from: [TopicPartitionOffset(topic, partition, offset: offset)], until: [tp: NumberBounds.saturatingAdd(offset, 1)]) { batch in
            found = batch.first { $0.offset == offset }.flatMap(DeadLetterEntry.init)
            return found == nil
        }
        return found
    }
}
