import Foundation
import Kafka
import Operations
import Workers

/// One redrive the console executed: who, when, which selection, how many, and which dead
/// letters (offset ranges per dead-letter partition), so that the page can list it and mark (and
/// leave out of the next preview) the dead letters it sent back.
public struct RedriveRecord: Sendable, Codable, Hashable {
    public var time: Int64
    /// Who redrove: the name of the token's owner (`--tokens-file`), "token holder" (one token)
    /// or "loopback" (a console without tokens).
    public var who: String
    public var stage: String
    public var reason: String
    public var origin: String
    public var field: String
    /// The original records' key and the single dead letter selected (absent in records
    /// written before they could be selected).
    public var key: String?
    public var letter: String?
    /// The original records' time range selected (epoch ms).
    public var since: Int64?
    public var until: Int64?
    /// "handled": the operator marked the selected dead letters handled (nothing was sent;
    /// they are left out of later previews like redriven ones). Absent: a redrive.
    public var action: String?
    public var maxRedrives: Int

    public var markedHandled: Bool { action == "handled" }
    public var sent: Int
    public var failed: Int
    public var exhausted: Int
    /// "topic/partition" of the dead-letter topic → [first, last] offset redriven.
    public var ranges: [String: [Int64]]

    public var selection: DeadLetterSelection {
        DeadLetterSelection(query: ["stage": stage, "reason": reason, "origin": origin, "field": field, "key": key ?? "", "letter": letter ?? "",
                                     "since": since.map(String.init) ?? "", "until": until.map(String.init) ?? ""])
    }

    /// Whether this redrive sent `e` back.
    public func covers(_ e: DeadLetterEntry) -> Bool {
        guard let range = ranges["\(e.record.topic)/\(e.record.partition)"], range.count == 2 else { return false }
        return (range[0]...range[1]).contains(e.record.offset) && selection.matches(e)
    }

    public init(
        time: Int64, who: String, selection: DeadLetterSelection, maxRedrives: Int, sent: Int, failed: Int, exhausted: Int, redriven: [DeadLetterEntry],
        markedHandled: Bool = false
    ) {
        self.time = time
        action = markedHandled ? "handled" : nil
        self.who = who
        stage = selection.value("stage")
        reason = selection.value("reason")
        origin = selection.value("origin")
        field = selection.value("field")
        key = selection.keys.isEmpty ? nil : selection.value("key")
        letter = selection.letters.isEmpty ? nil : selection.value("letter")
        since = selection.since
        until = selection.until
        self.maxRedrives = maxRedrives
        self.sent = sent
        self.failed = failed
        self.exhausted = exhausted
        var ranges: [String: [Int64]] = [:]
        for e in redriven {
            let key = "\(e.record.topic)/\(e.record.partition)"
            let r = ranges[key] ?? [e.record.offset, e.record.offset]
            ranges[key] = [min(r[0], e.record.offset), max(r[1], e.record.offset)]
        }
        self.ranges = ranges
    }
}

/// The redrive log: a topic the console owns (`--audit-topic`, one partition, kept), one JSON
/// record per redrive.
public struct RedriveLog: Sendable {
    public var topic: String
    public var kafka: KafkaConfiguration

    public init(topic: String, kafka: KafkaConfiguration) {
        self.topic = topic
        self.kafka = kafka
    }

    public func ensure() async throws {
        try await KafkaAdmin.ensureTopic(TopicSpec(name: topic, partitions: 1, config: ["retention.ms": "-1"]), configuration: kafka)
    }

    public func read() async throws -> [RedriveRecord] {
        var records: [RedriveRecord] = []
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        try await reader.readTopic(topic) { batch in
            records += batch.compactMap { $0.value.flatMap { try? JSONDecoder().decode(RedriveRecord.self, from: Data($0)) } }
        }
        return records
    }

    public func append(_ record: RedriveRecord, with producer: KafkaProducer) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let report = try await producer.send(ProducerRecord(topic: topic, partition: 0, key: nil, value: Array(try encoder.encode(record))))
        if let error = report.error { throw error }
    }
}
