import Foundation
import Workers
import Kafka

/// The upstream streams `pipelinectl produce` takes, each with its input topic and the entity
/// its records are keyed by (so that one entity's records stay in order on one partition).
public enum UpstreamStream: String, Sendable, CaseIterable {
    case prices, products, campaigns, hangouts, challenges

    /// The topology's input topic.
    public var topic: String { "\(rawValue).raw" }

    /// What the key is.
    public var entity: String {
        switch self {
        case .prices: "market code (code, market, or cd in the SIMPLE format)"
        case .products: "product id (id)"
        case .campaigns: "campaign id (id)"
        case .hangouts: "hangout id (hangoutInfoId, or the id in a request path hangout/{id})"
        case .challenges: "challenge id (id or challengeId, or the id in a request path challenges/…/{id})"
        }
    }

    /// The entity key of one upstream body as bytes, or nil when it names none: the same as
    /// ``entityKey(_:)-([String: Any])`` reads from the parsed object, from the top-level fields
    /// in place where they decide it (Foundation parses the body only where they do not: nested
    /// or path-derived keys, fractional or boolean ids).
    public func entityKey(of value: ArraySlice<UInt8>) -> String? {
        if let decided = TopLevelFields.firstScalar(keyNames, in: value) {
            if let key = decided { return key }
            if self != .hangouts && self != .challenges { return nil }  // no other rule to try
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any] else { return nil }
        return entityKey(object)
    }

    /// ``keyFields`` as the scanner compares them, made once.
    var keyNames: TopLevelFields.Names {
        switch self {
        case .prices: Self.priceNames
        case .products, .campaigns: Self.idNames
        case .hangouts: Self.hangoutNames
        case .challenges: Self.challengeNames
        }
    }
    private static let priceNames = TopLevelFields.Names(UpstreamStream.prices.keyFields)
    private static let idNames = TopLevelFields.Names(UpstreamStream.products.keyFields)
    private static let hangoutNames = TopLevelFields.Names(UpstreamStream.hangouts.keyFields)
    private static let challengeNames = TopLevelFields.Names(UpstreamStream.challenges.keyFields)

    /// The top-level fields an entity key is read from, in order.
    var keyFields: [String] {
        switch self {
        case .prices: ["code", "market", "cd"]
        case .products, .campaigns: ["id"]
        case .hangouts: ["hangoutInfoId"]
        case .challenges: ["id", "challengeId"]
        }
    }

    /// The entity key of one upstream body, or nil when it names none.
    public func entityKey(_ object: [String: Any]) -> String? {
        switch self {
        case .prices:
            return Self.scalar(object["code"]) ?? Self.scalar(object["market"]) ?? Self.scalar(object["cd"])
        case .products, .campaigns:
            return Self.scalar(object["id"])
        case .hangouts:
            if let id = Self.scalar(object["hangoutInfoId"]) { return id }
            if let data = object["data"] as? [String: Any], let id = Self.scalar(data["hangoutInfoId"]) { return id }
            return Self.pathID(object["path"], after: ["hangout", "like", "noLike"])
        case .challenges:
            if let id = Self.scalar(object["id"]) ?? Self.scalar(object["challengeId"]) { return id }
            return Self.pathID(object["path"], after: nil)
        }
    }

    static func scalar(_ v: Any?) -> String? {
        switch v {
        case let s as String where !s.isEmpty: return s
        // (A boolean id would read as 0 or 1: no upstream format has one.)
        case let n as NSNumber: return n.stringValue
        default: return nil
        }
    }

    /// The first path segment that looks like an id: for `hangout/h-101` the segment after a
    /// known word, for `challenges/apply/42/8` the first number.
    static func pathID(_ v: Any?, after words: Set<String>?) -> String? {
        guard let path = v as? String else { return nil }
        let parts = path.split(separator: "/").map(String.init)
        if let words {
            for (i, p) in parts.enumerated() where i > 0 && words.contains(parts[i - 1]) && !words.contains(p) && p != "list" { return p }
            return nil
        }
        return parts.first { Int64($0) != nil }
    }
}

/// One record `produce` will send, with where it came from in the input.
public struct ProduceLine: Sendable {
    public var source: String
    /// 1-based line number (for a whole-file array, the line its element starts on).
    public var line: Int
    public var record: ProducerRecord
    /// False when no entity key was found (the record goes without one; the partitioner spreads it).
    public var keyed: Bool
}

/// A line that was not used, and why.
public struct RejectedLine: Sendable, Hashable, CustomStringConvertible {
    public var source: String
    public var line: Int
    public var reason: String
    public var description: String { "\(source):\(line): \(reason)" }
}

/// Turns JSON-lines or JSON-array input in the upstream formats into keyed records.
///
/// Each line is a bare upstream body, or an envelope `{"key","value","headers","timestamp"}` as
/// `pipelinectl run` reads (its key, headers and timestamp are kept; with no key the entity
/// key of its value is used). A line that is a JSON array (Bigwalk's campaign list, Upbit's
/// REST ticker) gives one record per element, each keyed by its own entity; so does a whole
/// file that is one JSON array. Values are sent as their exact input bytes.
public struct ProduceParser: Sendable {
    public var stream: UpstreamStream
    public var topic: String

    public init(stream: UpstreamStream, topic: String? = nil) {
        self.stream = stream
        self.topic = topic ?? stream.topic
    }

    public func parse(_ data: [UInt8], source: String) -> (records: [ProduceLine], rejected: [RejectedLine]) {
        var records: [ProduceLine] = []
        var rejected: [RejectedLine] = []
        // A whole file that is one JSON array (possibly spread over many lines).
        if let first = data.firstIndex(where: { !Self.isSpace($0) }), data[first] == UInt8(ascii: "["),
            let elements = Self.splitArray(data, from: first)
        {
            var line = 1, counted = 0
            for (offset, bytes) in elements {
                line += data[counted..<offset].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
                counted = offset
                add(bytes, source: source, line: line, into: &records, rejected: &rejected)
            }
            return (records, rejected)
        }
        var lineNumber = 0
        for raw in data.split(separator: 0x0A, omittingEmptySubsequences: false) {
            lineNumber += 1
            var bytes = Array(raw)
            if bytes.last == 0x0D { bytes.removeLast() }
            guard bytes.contains(where: { !Self.isSpace($0) }) else { continue }
            parseBody(bytes, source: source, line: lineNumber, into: &records, rejected: &rejected)
        }
        return (records, rejected)
    }

    /// One message, as one line of input is read: a body or envelope, or a JSON array of them
    /// (one record per element). `pipelinectl ingest` reads each WebSocket message this way.
    public func parseBody(_ bytes: [UInt8], source: String, line: Int) -> (records: [ProduceLine], rejected: [RejectedLine]) {
        var records: [ProduceLine] = []
        var rejected: [RejectedLine] = []
        parseBody(bytes, source: source, line: line, into: &records, rejected: &rejected)
        return (records, rejected)
    }

    private func parseBody(_ bytes: [UInt8], source: String, line: Int, into records: inout [ProduceLine], rejected: inout [RejectedLine]) {
        if let first = bytes.firstIndex(where: { !Self.isSpace($0) }), bytes[first] == UInt8(ascii: "[") {
            guard let elements = Self.splitArray(bytes, from: first) else {
                rejected.append(RejectedLine(source: source, line: line, reason: "not valid JSON"))
                return
            }
            for (_, element) in elements { add(element, source: source, line: line, into: &records, rejected: &rejected) }
        } else {
            add(bytes, source: source, line: line, into: &records, rejected: &rejected)
        }
    }

    private func add(_ bytes: [UInt8], source: String, line: Int, into records: inout [ProduceLine], rejected: inout [RejectedLine]) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) else {
            rejected.append(RejectedLine(source: source, line: line, reason: "not valid JSON"))
            return
        }
        guard let dict = object as? [String: Any] else {
            rejected.append(RejectedLine(source: source, line: line, reason: "expected a JSON object (an upstream body or an envelope), got \(Self.kind(object))"))
            return
        }
        let envelope = JSONLinesRunner.parseLine(bytes, topic: topic, offset: 0)
        let isEnvelope = envelope.value != bytes[...]
        var record = ProducerRecord(topic: topic, value: bytes)
        var key: String?
        if isEnvelope {
            record.value = envelope.value.map(Array.init)
            record.headers = envelope.headers.map { KafkaHeader(key: $0.name, value: $0.value) }
            record.timestamp = envelope.timestamp == Int64.min ? nil : envelope.timestamp
            key = envelope.key.map { String(decoding: $0, as: UTF8.self) }
            if key == nil, let value = envelope.value,
                let inner = (try? JSONSerialization.jsonObject(with: Data(value), options: [])) as? [String: Any]
            {
                key = stream.entityKey(inner)
            }
        } else {
            key = stream.entityKey(dict)
        }
        record.key = key.map { Array($0.utf8) }
        records.append(ProduceLine(source: source, line: line, record: record, keyed: key != nil))
    }

    package static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }

    package static func kind(_ v: Any) -> String {
        switch v {
        case is String: "a string"
        case is NSNumber: "a number or boolean"
        case is NSNull: "null"
        case is [Any]: "an array"
        default: "another value"
        }
    }

    /// The elements of the JSON array starting at `start`, each with its byte offset, as their
    /// exact bytes; nil when it is not one valid array followed by nothing but whitespace.
    package static func splitArray(_ bytes: [UInt8], from start: Int) -> [(Int, [UInt8])]? {
        guard (try? JSONSerialization.jsonObject(with: Data(bytes[start...]), options: [])) is [Any] else { return nil }
        var elements: [(Int, [UInt8])] = []
        var depth = 0
        var inString = false
        var escaped = false
        var elementStart: Int?
        var i = start
        func finish(_ end: Int) {
            guard let s = elementStart else { return }
            var e = end
            while e > s, isSpace(bytes[e - 1]) { e -= 1 }
            if e > s { elements.append((s, Array(bytes[s..<e]))) }
            elementStart = nil
        }
        while i < bytes.count {
            let b = bytes[i]
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
            } else {
                switch b {
                case UInt8(ascii: "\""):
                    inString = true
                    if depth == 1, elementStart == nil { elementStart = i }
                case UInt8(ascii: "["), UInt8(ascii: "{"):
                    if depth == 1, elementStart == nil { elementStart = i }
                    depth += 1
                case UInt8(ascii: "]"), UInt8(ascii: "}"):
                    depth -= 1
                    if depth == 0 { finish(i); return elements }
                case UInt8(ascii: ","):
                    if depth == 1 { finish(i) }
                default:
                    if depth == 1, elementStart == nil, !isSpace(b) { elementStart = i }
                }
            }
            i += 1
        }
        return nil
    }
}
