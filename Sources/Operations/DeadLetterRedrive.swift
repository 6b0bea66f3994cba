import Workers
import Kafka

/// A dead letter as read from the dead-letter topic, with where it sits there.
public struct DeadLetterEntry: Sendable {
    public var record: ConsumerRecord
    public var letter: DeadLetter
    /// How many times it was redriven before (the `dead-letter.redriven` header), 0 if never.
    public var redriveCount: Int

    public init?(_ record: ConsumerRecord) {
        let headers = record.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) }
        guard let letter = DeadLetter(key: record.key, value: record.value, headers: headers, timestamp: record.timestamp ?? 0) else { return nil }
        self.record = record
        self.letter = letter
        self.redriveCount = headers.string(named: DeadLetterHeader.redriven).flatMap { Int($0) } ?? 0
    }
}

/// Which dead letters to list or redrive.
public struct DeadLetterSelection: Sendable, Hashable {
    public var reasons: Set<String> = []
    public var stages: Set<String> = []
    public var originTopics: Set<String> = []
    /// The failing field's path (`trade_price`, `$` for the record as a whole).
    public var fields: Set<String> = []
    /// Epoch ms: dead letters written at or after / before.
    public var since: Int64?
    public var until: Int64?
    /// The original record's key, as text (exact).
    public var keys: Set<String> = []
    /// Single dead letters by where they sit: ``address(_:)`` (`topic/partition@offset`).
    public var letters: Set<String> = []

    /// Where a dead letter sits in its topic, as ``letters`` names it.
    public static func address(_ e: DeadLetterEntry) -> String { "\(e.record.topic)/\(e.record.partition)@\(e.record.offset)" }

    public init() {}

    public func matches(_ e: DeadLetterEntry) -> Bool {
        if !reasons.isEmpty, !reasons.contains(e.letter.failure.reason.rawValue) { return false }
        if !stages.isEmpty, !stages.contains(e.letter.stage) { return false }
        if !originTopics.isEmpty, !originTopics.contains(e.letter.origin.topic) { return false }
        if !fields.isEmpty, !fields.contains(e.letter.failure.field) { return false }
        if let since, (e.record.timestamp ?? 0) < since { return false }
        if let until, (e.record.timestamp ?? 0) >= until { return false }
        if !keys.isEmpty {
            guard let key = e.letter.key, keys.contains(String(decoding: key, as: UTF8.self)) else { return false }
        }
        if !letters.isEmpty, !letters.contains(Self.address(e)) { return false }
        return true
    }
}

/// What a redrive does with one dead letter.
public enum RedriveDecision: Sendable {
    /// Send this record back to its origin topic.
    case send(ProducerRecord)
    /// Leave it: it was redriven `maxRedrives` times already and failed again.
    case exhausted(redriven: Int)
}

/// What a redrive of some dead letters does: the records to send back, where they go, and the
/// dead letters left because they were redriven `maxRedrives` times already. `pipelinectl dlq
/// redrive` and the console's preview both show it; both execute it.
public struct RedrivePlan: Sendable {
    public var sends: [ProducerRecord]
    public var exhausted: [DeadLetterEntry]
    /// Dead letters left because the topic they would go to is not one of their stage's (only
    /// with `stageTopics`), with why. A dead letter says itself where it goes back to, and anyone
    /// who may write to the dead-letter topic can write one: checked against the topology, a
    /// redrive cannot be made to write into another topic (the redrive log, another app's input).
    public var refused: [(entry: DeadLetterEntry, reason: String)]
    public let maxRedrives: Int

    /// `stageTopics`: each stage's inputs and outputs by stage name (the topology's); nil sends
    /// every dead letter where it says (`pipelinectl dlq redrive`, which has no topology and
    /// names its topics in its flags).
    public init(_ entries: [DeadLetterEntry], maxRedrives: Int, stageTopics: [String: Set<String>]? = nil) {
        self.maxRedrives = maxRedrives
        sends = []
        exhausted = []
        refused = []
        for e in entries {
            switch DeadLetterRedrive.decide(e, maxRedrives: maxRedrives) {
            case .send(let record):
                if let stageTopics {
                    guard let topics = stageTopics[e.letter.stage] else {
                        refused.append((e, "its stage \(e.letter.stage) is not in the topology"))
                        continue
                    }
                    guard topics.contains(record.topic) else {
                        refused.append((e, "it names \(record.topic), which stage \(e.letter.stage) neither reads nor writes"))
                        continue
                    }
                }
                sends.append(record)
            case .exhausted: exhausted.append(e)
            }
        }
    }

    /// How many records go to each topic and partition, sorted.
    public var destinations: [(topic: String, partition: Int32?, count: Int)] {
        var counts: [String: [Int32: Int]] = [:]
        for r in sends { counts[r.topic, default: [:]][r.partition ?? -1, default: 0] += 1 }
        return counts.keys.sorted().flatMap { topic in
            counts[topic]!.keys.sorted().map { p in (topic, p < 0 ? nil : p, counts[topic]![p]!) }
        }
    }

    /// Who processes a sent record again, in words: the one stage named by
    /// `dead-letter.redrive-for`, else every reader of its topic (an undelivered output, or a
    /// dead letter written before stages were named in it).
    public static func seenAgainBy(_ record: ProducerRecord) -> String {
        if let stage = record.headers.first(where: { $0.key == DeadLetterHeader.redriveFor })?.value {
            return "stage \(String(decoding: stage, as: UTF8.self)) only"
        }
        return "every stage reading \(record.topic)"
    }

    /// How many records each audience (``seenAgainBy(_:)``) gets, sorted.
    public var audiences: [(seenBy: String, count: Int)] {
        var counts: [String: Int] = [:]
        for r in sends { counts[Self.seenAgainBy(r), default: 0] += 1 }
        return counts.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// Sends the records (in chunks of 10,000); returns how many were delivered and the errors.
    public func execute(with producer: KafkaProducer) async throws -> (sent: Int, failed: [KafkaError]) {
        var failed: [KafkaError] = []
        for chunk in stride(from: 0, to: sends.count, by: 10_000) {
            let reports = try await producer.send(Array(sends[chunk..<min(chunk + 10_000, sends.count)]))
            failed += reports.compactMap(\.error)
        }
        return (sends.count - failed.count, failed)
    }
}

public enum DeadLetterRedrive {
    /// The record to send back: the original key, value, timestamp and headers (without the
    /// `dead-letter.*` ones), to the origin topic and partition (an undelivered output: to the
    /// topic and partition it was going to), with `dead-letter.redriven` counting the redrives.
    /// An input goes with `dead-letter.redrive-for` naming the stage that failed it: only that
    /// stage processes it again, the others reading the topic skip it (a dead letter written
    /// before stages were named in it, without `dead-letter.transform`, goes without: every
    /// stage of the topic sees it). A record that was redriven `maxRedrives` times already is
    /// not sent again, so a record that keeps failing does not loop.
    public static func decide(_ e: DeadLetterEntry, maxRedrives: Int, keepPartition: Bool = true) -> RedriveDecision {
        guard e.redriveCount < maxRedrives else { return .exhausted(redriven: e.redriveCount) }
        var headers = e.letter.headers.filter { $0.name != DeadLetterHeader.redriven && $0.name != DeadLetterHeader.redriveFor }
            .map { KafkaHeader(key: $0.name, value: $0.value) }
        headers.append(KafkaHeader(key: DeadLetterHeader.redriven, string: String(e.redriveCount + 1)))
        if let destination = e.letter.destination {
            // An undelivered output goes where it was going: re-running its input could not make
            // it again (a stateful stage has moved past it), and no other stage sees it twice.
            return .send(ProducerRecord(
                topic: destination.topic, partition: keepPartition ? destination.partition : nil,
                key: e.letter.key, value: e.letter.value, headers: headers, timestamp: e.record.timestamp))
        }
        if e.letter.transform != nil { headers.append(KafkaHeader(key: DeadLetterHeader.redriveFor, string: e.letter.stage)) }
        return .send(ProducerRecord(
            topic: e.letter.origin.topic, partition: keepPartition ? e.letter.origin.partition : nil,
            key: e.letter.key, value: e.letter.value, headers: headers, timestamp: e.record.timestamp))
    }
}
