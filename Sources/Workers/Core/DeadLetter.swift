/// Header names on dead letters. A dead letter is the original record (key, value, headers and
/// timestamp unchanged) plus these headers; its value is never rewritten.
public enum DeadLetterHeader {
    /// The stage (the topology's unit: `prices-candles`) whose worker dead-lettered the record.
    public static let stage = "dead-letter.stage"
    /// The transform, or chain of transforms, that failed (`prices.decode,prices.candles`).
    public static let transform = "dead-letter.transform"
    public static let reason = "dead-letter.reason"
    public static let field = "dead-letter.field"
    public static let detail = "dead-letter.detail"
    public static let originTopic = "dead-letter.origin.topic"
    public static let originPartition = "dead-letter.origin.partition"
    public static let originOffset = "dead-letter.origin.offset"
    /// The error code when the record failed downstream of the transform (e.g. a delivery error).
    public static let errorCode = "dead-letter.error-code"
    /// How many times the record was tried.
    public static let attempts = "dead-letter.attempts"
    /// When the record first failed, epoch milliseconds.
    public static let firstFailure = "dead-letter.first-failure"
    /// Set on a record that `pipelinectl dlq redrive` sent back: its value is the redrive count.
    public static let redriven = "dead-letter.redriven"
    /// Set on an input a redrive sent back to its origin topic: the one stage that processes it
    /// again (the stage that dead-lettered it). Every other stage reading the topic skips it.
    public static let redriveFor = "dead-letter.redrive-for"
    /// Set on an undelivered output: the topic it was produced to. Such a dead letter is the
    /// output itself (key, value, headers, timestamp), not the input; a redrive sends it there.
    public static let destinationTopic = "dead-letter.destination.topic"
    /// The partition the undelivered output was assigned, when the producer had chosen one.
    public static let destinationPartition = "dead-letter.destination.partition"
}

/// A record that could not be used, as it goes to the dead-letter topic.
///
/// Two kinds share the format. An input the transform could not use (or whose outputs cannot be
/// made again from it) is the input itself; a redrive sends it back to its origin topic. An
/// output that could not be delivered past its attempts is the output itself, with
/// ``destination`` naming where it was going and ``origin`` the input that caused it; a redrive
/// sends it to the destination, so an output a stateful transform can never make again (a candle
/// whose minute has closed) is not lost.
///
/// The one dead-letter format: the Kafka runtime, ``TestDriver`` and `pipelinectl run` all
/// build it with ``init(stage:transform:input:failure:errorCode:attempts:firstFailure:)`` and turn it into
/// a record with ``recordHeaders``, so a transform tested one way behaves the same on Kafka.
public struct DeadLetter: Sendable, Hashable {
    /// The stage whose worker dead-lettered the record (what `dlq --stage` selects).
    public var stage: String
    /// The transform or chain that failed; nil in dead letters written before it was recorded.
    public var transform: String?
    public var origin: RecordOrigin
    public var failure: DecodeFailure
    /// The failed record, unchanged.
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [RecordHeader]
    public var timestamp: Int64
    /// Set when the record failed after the transform (a delivery error code), nil for bad input.
    public var errorCode: String?
    public var attempts: Int
    public var firstFailure: Int64?
    /// Where an undelivered output was going (topic, and partition when known); nil for an input.
    public var destination: Destination?

    public struct Destination: Sendable, Hashable {
        public var topic: String
        public var partition: Int32?
        public init(topic: String, partition: Int32?) {
            self.topic = topic
            self.partition = partition
        }
    }

    /// An output that could not be delivered: `output` is the record as it was produced (its
    /// key, value, headers and timestamp are kept unchanged), `input` the input it came from.
    public init(
        stage: String, transform: String?, undelivered output: InputRecord, destination: Destination, input origin: RecordOrigin,
        failure: DecodeFailure, errorCode: String?, attempts: Int, firstFailure: Int64?
    ) {
        self.init(stage: stage, transform: transform, input: output, failure: failure, errorCode: errorCode, attempts: attempts, firstFailure: firstFailure)
        self.origin = origin
        self.destination = destination
    }

    public init(
        stage: String, transform: String?, input: InputRecord, failure: DecodeFailure, errorCode: String? = nil, attempts: Int = 1,
        firstFailure: Int64? = nil
    ) {
        self.stage = stage
        self.transform = transform
        self.origin = input.origin
        self.failure = failure
        self.key = input.key
        self.value = input.value.map(Array.init)
        self.headers = input.headers
        self.timestamp = input.timestamp
        self.errorCode = errorCode
        self.attempts = attempts
        self.firstFailure = firstFailure
    }

    /// The original headers, then the `dead-letter.*` ones (any the original record already
    /// carried, from an earlier failure, are replaced).
    public var recordHeaders: [RecordHeader] {
        var out = headers.filter { !$0.name.hasPrefix("dead-letter.") || $0.name == DeadLetterHeader.redriven }
        out.append(RecordHeader(DeadLetterHeader.stage, stage))
        if let transform { out.append(RecordHeader(DeadLetterHeader.transform, transform)) }
        out.append(RecordHeader(DeadLetterHeader.reason, failure.reason.rawValue))
        out.append(RecordHeader(DeadLetterHeader.field, failure.field))
        out.append(RecordHeader(DeadLetterHeader.detail, failure.detail))
        out.append(RecordHeader(DeadLetterHeader.originTopic, origin.topic))
        out.append(RecordHeader(DeadLetterHeader.originPartition, String(origin.partition)))
        out.append(RecordHeader(DeadLetterHeader.originOffset, String(origin.offset)))
        if let errorCode { out.append(RecordHeader(DeadLetterHeader.errorCode, errorCode)) }
        out.append(RecordHeader(DeadLetterHeader.attempts, String(attempts)))
        if let firstFailure { out.append(RecordHeader(DeadLetterHeader.firstFailure, String(firstFailure))) }
        if let destination {
            out.append(RecordHeader(DeadLetterHeader.destinationTopic, destination.topic))
            if let p = destination.partition { out.append(RecordHeader(DeadLetterHeader.destinationPartition, String(p))) }
        }
        return out
    }

    /// Reads a dead letter back from a record's headers (nil if they are not a dead letter's).
    public init?(key: [UInt8]?, value: [UInt8]?, headers: [RecordHeader], timestamp: Int64) {
        guard let stage = headers.string(named: DeadLetterHeader.stage),
            let reasonText = headers.string(named: DeadLetterHeader.reason),
            let reason = DecodeFailure.Reason(rawValue: reasonText),
            let topic = headers.string(named: DeadLetterHeader.originTopic),
            let partition = headers.string(named: DeadLetterHeader.originPartition).flatMap({ Int32($0) }),
            let offset = headers.string(named: DeadLetterHeader.originOffset).flatMap({ Int64($0) })
        else { return nil }
        self.stage = stage
        self.transform = headers.string(named: DeadLetterHeader.transform)
        self.origin = RecordOrigin(topic: topic, partition: partition, offset: offset)
        self.failure = DecodeFailure(
            field: headers.string(named: DeadLetterHeader.field) ?? "", reason: reason,
            detail: headers.string(named: DeadLetterHeader.detail) ?? "")
        self.key = key
        self.value = value
        self.headers = headers.filter { !$0.name.hasPrefix("dead-letter.") || $0.name == DeadLetterHeader.redriven }
        self.timestamp = timestamp
        self.errorCode = headers.string(named: DeadLetterHeader.errorCode)
        self.attempts = headers.string(named: DeadLetterHeader.attempts).flatMap { Int($0) } ?? 1
        self.firstFailure = headers.string(named: DeadLetterHeader.firstFailure).flatMap { Int64($0) }
        self.destination = headers.string(named: DeadLetterHeader.destinationTopic).map {
            Destination(topic: $0, partition: headers.string(named: DeadLetterHeader.destinationPartition).flatMap { Int32($0) })
        }
    }
}
