/// An error from the Kafka layer.
///
/// It carries what went wrong as a ``Code``, the librdkafka error code when librdkafka reported
/// it (`rd_kafka_resp_err_t`, negative for local errors), and whether retrying may help or the
/// client is unusable from now on. Messages never contain configuration secrets.
public struct KafkaError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// A configuration key or value was rejected (``KafkaError/key`` names it).
        case invalidConfiguration
        /// The librdkafka loaded at run time is too old to talk to current brokers.
        case unsupportedRuntime
        /// A message could not be delivered.
        case delivery
        /// The producer's local queue is full; try again after deliveries complete.
        case queueFull
        /// A broker, topic or group operation failed.
        case broker
        /// An admin operation failed.
        case admin
        /// The operation did not finish before its deadline.
        case timedOut
        /// The client was closed.
        case closed
        /// The task waiting for it was cancelled (a record may still be delivered: its report
        /// is no longer awaited).
        case cancelled
        /// Any other librdkafka error.
        case other
    }

    public var code: Code
    /// The librdkafka error code (`rd_kafka_resp_err_t`), if librdkafka reported the error.
    public var rdKafkaCode: Int32?
    /// Retrying the operation may succeed.
    public var isRetriable: Bool
    /// The client cannot be used any more (e.g. a fatal idempotent-producer error, or a
    /// transactional producer fenced by a newer instance).
    public var isFatal: Bool
    /// The open transaction cannot commit any more and must be aborted
    /// (`rd_kafka_error_txn_requires_abort`); the producer itself stays usable.
    public var requiresAbort: Bool = false
    /// The configuration key the error is about, if any.
    public var key: String?
    /// What happened, in words. Never contains secret configuration values.
    public var message: String

    public init(
        code: Code,
        message: String,
        rdKafkaCode: Int32? = nil,
        isRetriable: Bool = false,
        isFatal: Bool = false,
        key: String? = nil
    ) {
        self.code = code
        self.message = message
        self.rdKafkaCode = rdKafkaCode
        self.isRetriable = isRetriable
        self.isFatal = isFatal
        self.key = key
    }

    public var description: String {
        var text = "KafkaError.\(code.rawValue): \(message)"
        if let rdKafkaCode { text += " (librdkafka code \(rdKafkaCode))" }
        if isFatal { text += " [fatal]" } else if requiresAbort { text += " [abort the transaction]" } else if isRetriable { text += " [retriable]" }
        return text
    }

    static func invalidConfiguration(key: String, _ message: String) -> KafkaError {
        KafkaError(code: .invalidConfiguration, message: message, key: key)
    }

    static let closed = KafkaError(code: .closed, message: "the client is closed")
    static let cancelled = KafkaError(code: .cancelled, message: "the waiting task was cancelled; the record's report is no longer awaited")

    package static func timedOut(_ what: String) -> KafkaError {
        KafkaError(code: .timedOut, message: "\(what) did not finish before its deadline", isRetriable: true)
    }

    /// A delivery that failed with this error fails again however often it is retried (the
    /// record is larger than `message.max.bytes`, the broker refuses the record or the topic):
    /// retrying only blocks what comes after it.
    public var cannotSucceed: Bool {
        guard code == .delivery || code == .broker || code == .other, let rdKafkaCode else { return false }
        return RDKafkaError.permanentDeliveryCodes.contains(rdKafkaCode)
    }

    /// The producer that reported this cannot deliver anything any more: it failed fatally, or
    /// the broker fenced it or lost its producer id or sequence (see
    /// ``KafkaProducer/unusable``). A new producer is needed.
    public var meansProducerUnusable: Bool {
        isFatal || rdKafkaCode.map(RDKafkaError.producerStateCodes.contains) ?? false
    }

    /// The group coordinator no longer knows this member (evicted, fenced by its instance id, or
    /// its assignment lost): its partitions are another member's.
    public var meansMemberFenced: Bool {
        rdKafkaCode.map(RDKafkaError.fencedMemberCodes.contains) ?? false
    }

    /// The record is larger than the producer's `message.max.bytes` or the topic's
    /// `max.message.bytes` (`MSG_SIZE_TOO_LARGE`): no retry and no other topic of the same
    /// limits takes it.
    public var isMessageTooLarge: Bool { rdKafkaCode == RDKafkaError.messageTooLarge }

    /// The group is rebalancing (`REBALANCE_IN_PROGRESS`, `ILLEGAL_GENERATION`): a commit may
    /// succeed once the rebalance settles.
    public var isRebalanceInProgress: Bool {
        rdKafkaCode.map(RDKafkaError.rebalancingCodes.contains) ?? false
    }
}
