/// Runs a transform or chain over JSON lines and renders its outputs and failures as JSON lines:
/// the engine of `pipelinectl run`, usable (and tested) without the CLI.
///
/// ## Input: one record per line
/// Either an envelope object with a `value` key and only these keys:
/// ```json
/// {"topic":"upbit.ticker","partition":0,"offset":7,"key":"KRW-BTC","value":{…} or "text" or null,
///  "headers":{"user-id":"u-1"},"timestamp":1700000000000}
/// ```
/// (`value` may be any JSON value — used as its exact bytes —, a string — used as UTF-8 text —,
/// or `null` — a tombstone; every other key is optional: topic defaults to ``defaultTopic``,
/// partition to 0, offset to the line's record number, timestamp to 0), or any other JSON
/// text (a bare upstream message), which becomes the value of a record with default fields.
/// Blank lines are skipped.
///
/// ## Output: one line per output record or failure
/// ```json
/// {"type":"output","output":"prices.ticks","key":"KRW-BTC","value":{…},"headers":{…},"dedupe_key":"…"}
/// {"type":"dead-letter","key":null,"value":{…the input…},"headers":{"dead-letter.stage":"prices.decode","dead-letter.reason":"wrong-type",…}}
/// ```
/// A value that is valid JSON is embedded as JSON, anything else as a string; a tombstone is `null`.
/// Each record's `timestamp` is the transform's ``TransformContext/now``.
public struct JSONLinesRunner: Sendable {
    public private(set) var runner: TransformRunner
    public var defaultTopic: String
    private var recordNumber: Int64 = 0
    private var lastTimestamp: Int64 = 0

    public init(runner: TransformRunner, defaultTopic: String = "stdin") {
        self.runner = runner
        self.defaultTopic = defaultTopic
    }

    /// Processes one input line; returns the output lines it produced.
    public mutating func process(line: String) -> [String] {
        let bytes = Array(line.utf8)
        guard bytes.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D && $0 != 0x0A }) else { return [] }
        var record = Self.parseLine(bytes, topic: defaultTopic, offset: recordNumber)
        recordNumber += 1
        if record.timestamp == Int64.min { record.timestamp = lastTimestamp }
        lastTimestamp = record.timestamp
        let out = runner.process(record, context: TransformContext(now: record.timestamp))
        return render(out, input: record)
    }

    /// Lets time pass to `now` (closes batching windows); returns the output lines.
    public mutating func advance(to now: Int64) -> [String] {
        render(runner.advance(context: TransformContext(now: now)), input: .advance(at: now))
    }

    private func render(_ out: TransformOutput, input: InputRecord) -> [String] {
        var lines: [String] = []
        for r in out.records {
            lines.append(Self.line(type: "output", output: r.output, key: r.key, value: r.value, headers: r.headers, dedupeKey: r.dedupeKey))
        }
        for f in out.failures {
            // The same record the Kafka runtime sends to the dead-letter topic.
            let dead = DeadLetter(stage: runner.name, transform: runner.name, input: input, failure: f)
            lines.append(Self.line(type: "dead-letter", output: nil, key: dead.key, value: dead.value, headers: dead.recordHeaders, dedupeKey: nil))
        }
        return lines
    }

    private static func line(
        type: String, output: String?, key: [UInt8]?, value: [UInt8]?, headers: [RecordHeader], dedupeKey: String?
    ) -> String {
        var w = JSONWriter()
        w.beginObject()
        w.key("type"); w.string(type)
        if let output { w.key("output"); w.string(output) }
        w.key("key"); w.optional(key.map { String(decoding: $0, as: UTF8.self) })
        w.key("value")
        if let v = value {
            if isJSON(v) { w.raw(v) } else { w.string(String(decoding: v, as: UTF8.self)) }
        } else {
            w.null()
        }
        w.key("headers")
        w.beginObject()
        for h in headers { w.key(text: h.name); w.string(String(decoding: h.value, as: UTF8.self)) }
        w.endObject()
        if let dedupeKey { w.key("dedupe_key"); w.string(dedupeKey) }
        w.endObject()
        return String(decoding: w.bytes, as: UTF8.self)
    }

    static func isJSON(_ bytes: [UInt8]) -> Bool {
        let limits = DecodeLimits(maxBytes: Int.max, maxDepth: 512, maxArrayElements: Int.max)
        return (try? JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in try s.skipValue() }) != nil
    }

    private enum Field: Int { case topic, partition, offset, key, value, headers, timestamp }
    private static let keys = KeyTable([
        ("topic", Field.topic.rawValue), ("partition", Field.partition.rawValue), ("offset", Field.offset.rawValue),
        ("key", Field.key.rawValue), ("value", Field.value.rawValue), ("headers", Field.headers.rawValue),
        ("timestamp", Field.timestamp.rawValue),
    ])

    /// An envelope if the line is one, else the whole line as the value. `timestamp` is
    /// `Int64.min` when the line does not give one.
    public static func parseLine(_ bytes: [UInt8], topic: String, offset: Int64) -> InputRecord {
        let bare = InputRecord(
            value: bytes, timestamp: Int64.min, origin: RecordOrigin(topic: topic, partition: 0, offset: offset))
        let limits = DecodeLimits(maxBytes: Int.max, maxDepth: 512, maxArrayElements: Int.max)
        let envelope = try? JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) -> InputRecord? in
            guard try s.peek() == UInt8(ascii: "{") else { return nil }
            try s.beginObject()
            var record = bare
            var sawValue = false
            var first = true
            var expected = keys.firstExpected
            while let key = try s.nextKey(&first, in: keys, expected: &expected) {
                guard let field = Field(rawValue: key.field) else { return nil }  // not an envelope
                switch field {
                case .topic: record.origin.topic = try s.readString()
                case .partition: record.origin.partition = Int32(clamping: try s.readInt())
                case .offset: record.origin.offset = try s.readInt()
                case .timestamp: record.timestamp = try s.readInt()
                case .key: record.key = try s.readOptionalString().map { Array($0.utf8) }
                case .value:
                    sawValue = true
                    switch try s.peek() {
                    case UInt8(ascii: "n"): _ = try s.consumeNull(); record.value = nil
                    case UInt8(ascii: "\""): record.value = Array(try s.readString().utf8)[...]
                    default:
                        let start = s.pos
                        try s.skipValue()
                        record.value = bytes[start..<s.pos]
                    }
                case .headers:
                    record.headers = []
                    try s.beginObject()
                    var firstHeader = true
                    while let h = try s.nextKey(&firstHeader) {
                        record.headers.append(RecordHeader(try s.string(h), try s.readString()))
                    }
                }
            }
            return sawValue ? record : nil
        }
        return (envelope ?? nil) ?? bare
    }
}
