import Foundation
import Kafka
import Operations
import Workers

/// One POST body of `pipelinectl ingest http`, as records to produce: each keyed as
/// `pipelinectl produce` keys it (``UpstreamStream/entityKey(_:)``) and validated by the decoder
/// its stream's decode stage uses, before anything is produced. Pure: bytes in, records and
/// rejections out.
///
/// A body is one upstream JSON object, a JSON array of them (one record per element), or JSON
/// lines (one record per line; a line that is an array gives one per element). Values are sent
/// as their exact bytes. A record may also be an envelope `{"key","headers","timestamp","value"}`
/// as `pipelinectl produce` reads, when the backend sets the key, headers or event time. Records are numbered from 0 in body order; a rejection names its
/// record's index, the field and the reason, as a dead letter does.
public struct IngestBatch: Sendable {
    public var records: [ProducerRecord]
    public var rejected: [Rejection]

    public struct Rejection: Error, Sendable, Hashable, Codable {
        public var index: Int
        /// The field path (`trade_price`, `[2].id`), or `$` for the record as a whole.
        public var field: String
        /// A stable reason (``DecodeFailure/Reason``: `missing-field`, `invalid-value`, …).
        public var reason: String
        public var detail: String
    }

    /// Why a body cannot be read as records at all.
    public enum BodyError: Error, Sendable, Equatable, CustomStringConvertible {
        case empty
        case tooManyRecords(count: Int, limit: Int)

        public var description: String {
            switch self {
            case .empty: "the body holds no record (send a JSON object, an array of them, or JSON lines)"
            case .tooManyRecords(let count, let limit): "\(count) records in one request; at most \(limit) (--max-records)"
            }
        }
    }

    /// The records of `body` for `stream`, to `topic`; at most `maxRecords` of them, each at most
    /// `maxRecordBytes` as the producer counts it (``wireSize(_:)``, against its
    /// `message.max.bytes`): a larger one would fail in the producer after the others of the body
    /// were sent, so it is refused here with the rest of the body.
    public static func parse(
        _ body: [UInt8], stream: UpstreamStream, topic: String, maxRecords: Int, maxRecordBytes: Int = defaultMaxRecordBytes,
        validator: IngestValidator
    ) throws(BodyError) -> IngestBatch {
        let values = try split(body)
        guard values.count <= maxRecords else { throw .tooManyRecords(count: values.count, limit: maxRecords) }
        var batch = IngestBatch(records: [], rejected: [])
        batch.records.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            // Each record is read once by the stream's decoder (which refuses anything but a valid
            // object of its format) and once, in place, for its entity key.
            if value.first != UInt8(ascii: "{") {
                guard let other = try? JSONSerialization.jsonObject(with: Data(value), options: [.fragmentsAllowed]) else {
                    batch.rejected.append(Rejection(index: index, field: "$", reason: DecodeFailure.Reason.malformedJSON.rawValue, detail: "not valid JSON"))
                    continue
                }
                batch.rejected.append(Rejection(
                    index: index, field: "$", reason: DecodeFailure.Reason.wrongType.rawValue,
                    detail: "expected a JSON object, got \(ProduceParser.kind(other))"))
                continue
            }
            // An envelope has a "value" field: a record without those bytes is not one (most
            // are not; the envelope reader is a scan of its own).
            let envelope = Self.mayBeEnvelope(value) ? JSONLinesRunner.parseLine(value, topic: topic, offset: 0) : nil
            if let envelope, envelope.value != value[...] {
                switch enveloped(envelope, stream: stream, topic: topic, validator: validator) {
                case .success(let record): batch.records.append(record)
                case .failure(var rejection):
                    rejection.index = index
                    batch.rejected.append(rejection)
                }
                continue
            }
            let key: String?
            switch validator.verdict(of: value, stream: stream) {
            case .refused(let failure):
                batch.rejected.append(Rejection(index: index, field: failure.field, reason: failure.reason.rawValue, detail: failure.detail))
                continue
            case .accepted(let known):
                key = known ?? stream.entityKey(of: value[...])
            }
            batch.records.append(ProducerRecord(topic: topic, key: key.map { Array($0.utf8) }, value: value))
        }
        // Sized after validation, so that an invalid record is named for what is wrong with it.
        if batch.records.contains(where: { wireSize($0) > maxRecordBytes }) {
            let invalid = batch.rejected.map(\.index).sorted()
            var kept: [ProducerRecord] = []
            for (n, record) in batch.records.enumerated() {
                let size = wireSize(record)
                guard size > maxRecordBytes else { kept.append(record); continue }
                // The body index of the n-th valid record: count the invalid ones before it.
                var index = n
                for i in invalid where i <= index { index += 1 }
                batch.rejected.append(Rejection(
                    index: index, field: "$", reason: DecodeFailure.Reason.invalidValue.rawValue,
                    detail: "the record is \(size) bytes as the producer counts it; at most \(maxRecordBytes) (the producer's message.max.bytes)"))
            }
            batch.records = kept
            batch.rejected.sort { $0.index < $1.index }
        }
        return batch
    }

    /// librdkafka's default `message.max.bytes`, the largest record it sends.
    public static let defaultMaxRecordBytes = 1_000_000

    /// The size librdkafka checks against `message.max.bytes` when a record is produced
    /// (`rd_kafka_msg_max_wire_size`: a v2 record's largest framing, 36 bytes, key, value and
    /// headers, each header with its two length varints).
    public static func wireSize(_ record: ProducerRecord) -> Int {
        36 + (record.key?.count ?? 0) + (record.value?.count ?? 0)
            + record.headers.reduce(0) { $0 + 10 + $1.key.utf8.count + ($1.value?.count ?? 0) }
    }

    /// A record sent as an envelope (`{"key","headers","timestamp","value"}`, as `pipelinectl
    /// produce` reads it): for a backend that sets the key, headers (e.g. `user-id`) or the
    /// event time itself. Its value is validated like a bare body; `"value": null` is a
    /// tombstone and needs a key; without a key the value's entity key is used.
    private static func enveloped(
        _ envelope: InputRecord, stream: UpstreamStream, topic: String, validator: IngestValidator
    ) -> Result<ProducerRecord, Rejection> {
        var key = envelope.key
        let value = envelope.value.map(Array.init)  // the record keeps its own copy
        if let inner = value {
            switch validator.verdict(of: inner, stream: stream, headers: envelope.headers) {
            case .refused(let failure):
                return .failure(Rejection(index: 0, field: "value" + (failure.field == "$" ? "" : "." + failure.field), reason: failure.reason.rawValue, detail: failure.detail))
            case .accepted(let known):
                if key == nil { key = (known ?? stream.entityKey(of: inner[...])).map { Array($0.utf8) } }
            }
        } else if key == nil {
            return .failure(Rejection(index: 0, field: "key", reason: DecodeFailure.Reason.missingField.rawValue, detail: "a tombstone (\"value\": null) needs a key"))
        }
        if envelope.timestamp != Int64.min, !(1...NumberBounds.epochMillis.upperBound).contains(envelope.timestamp) {
            // librdkafka sends 0 as "now", and a broker reads a negative one as none.
            return .failure(Rejection(
                index: 0, field: "timestamp", reason: DecodeFailure.Reason.invalidValue.rawValue,
                detail: "must be an epoch-ms time after 1970-01-01T00:00:00Z and before the year 10000, got \(envelope.timestamp)"))
        }
        var record = ProducerRecord(topic: topic, key: key, value: value)
        record.headers = envelope.headers.map { KafkaHeader(key: $0.name, value: $0.value) }
        record.timestamp = envelope.timestamp == Int64.min ? nil : envelope.timestamp
        return .success(record)
    }

    /// The body's records as byte strings, in order.
    static func split(_ body: [UInt8]) throws(BodyError) -> [[UInt8]] {
        guard let first = body.firstIndex(where: { !ProduceParser.isSpace($0) }) else { throw .empty }
        // One array or one object, possibly pretty-printed over many lines; else JSON lines.
        if body[first] == UInt8(ascii: "["), let elements = ProduceParser.splitArray(body, from: first) {
            guard !elements.isEmpty else { throw .empty }
            return elements.map(\.1)
        }
        if body[first] == UInt8(ascii: "{"), TopLevelFields.isOneValue(body, from: first) {
            return [trimmed(body[first...])]
        }
        var values: [[UInt8]] = []
        for line in lines(body) {
            let line = trimmed(body[line])
            guard !line.isEmpty else { continue }
            if line[0] == UInt8(ascii: "["), let elements = ProduceParser.splitArray(line, from: 0) {
                values += elements.map(\.1)  // (an empty array adds nothing)
            } else {
                values.append(line)
            }
        }
        guard !values.isEmpty else { throw .empty }
        return values
    }

    /// The ranges of `body`'s lines (between line feeds, empty ones left out), found with memchr.
    static func lines(_ body: [UInt8]) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        body.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            var start = 0
            while start < buffer.count {
                let end = memchr(base + start, 0x0A, buffer.count - start).map { UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) - base } ?? buffer.count
                if end > start { ranges.append(start..<end) }
                start = end + 1
            }
        }
        return ranges
    }

    /// Whether `value` holds the bytes `"value"` (an envelope's field): each `v` found with
    /// memchr (a record has few; it has a quote every few bytes), then the bytes around it.
    static func mayBeEnvelope(_ value: [UInt8]) -> Bool {
        let needle: StaticString = #""value""#
        return value.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress, buffer.count >= needle.utf8CodeUnitCount else { return false }
            // The `v` is the needle's second byte: from 1 to count - needle + 1.
            var at = 1
            let last = buffer.count - needle.utf8CodeUnitCount + 1
            while at <= last, let v = memchr(base + at, Int32(UInt8(ascii: "v")), last - at + 1) {
                let i = UnsafePointer(v.assumingMemoryBound(to: UInt8.self)) - base
                if memcmp(base + i - 1, needle.utf8Start, needle.utf8CodeUnitCount) == 0 { return true }
                at = i + 1
            }
            return false
        }
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var start = bytes.startIndex, end = bytes.endIndex
        while start < end, ProduceParser.isSpace(bytes[start]) { start += 1 }
        while end > start, ProduceParser.isSpace(bytes[end - 1]) { end -= 1 }
        return Array(bytes[start..<end])
    }
}

/// The decoders of the streams' decode stages, as validators: a record the endpoint accepts is
/// one its decode stage will not dead-letter for its content.
public struct IngestValidator: Sendable {
    let prices: PriceTickDecoder
    let products: ProductDecoder
    let campaigns: CampaignDecoder
    let hangouts: HangoutDecoder
    let challenges: ChallengeDecoder

    /// The decoders as the stages build them by default (`TransformCatalog`'s limits and offsets).
    public init(options: TransformCatalog.Options = TransformCatalog.Options()) {
        prices = PriceTickDecoder(limits: options.limits)
        products = ProductDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        campaigns = CampaignDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        hangouts = HangoutDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        challenges = ChallengeDecoder(limits: options.limits)
    }

    /// What the stream's decoder says of a record.
    public enum Verdict: Sendable {
        case refused(DecodeFailure)
        /// Read: with the record's entity key when the decoder read it on the way (a ticker's
        /// market), so that the caller need not read the record again for it; nil: not read.
        case accepted(knownKey: String?)
    }

    /// Whether the stream's decoder reads `value` (with these record headers: the hangouts'
    /// user-scoped messages need `user-id`), and the entity key when it read it on the way.
    public func verdict(of value: [UInt8], stream: UpstreamStream, headers: [RecordHeader] = []) -> Verdict {
        do {
            switch stream {
            case .prices: return .accepted(knownKey: try prices.validate(readingMarket: value[...]))
            case .products: _ = try products.decode(value)
            case .campaigns: _ = try campaigns.decode(value)
            case .hangouts: _ = try hangouts.decode(value, user: headers.string(named: hangouts.userHeader).flatMap { $0.isEmpty ? nil : $0 })
            case .challenges: _ = try challenges.decode(value)
            }
            return .accepted(knownKey: nil)
        } catch {
            return .refused(error)
        }
    }
}
