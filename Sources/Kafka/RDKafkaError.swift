import CKafka

/// Turns librdkafka's error values into ``KafkaError``. Callers of the Kafka layer never see
/// `rd_kafka_resp_err_t`.
package enum RDKafkaError {
    package static func make(_ err: rd_kafka_resp_err_t, code: KafkaError.Code = .other, context: String? = nil) -> KafkaError {
        let text = String(cString: rd_kafka_err2str(err))
        let name = String(cString: rd_kafka_err2name(err))
        return KafkaError(
            code: err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? .queueFull : (err == RD_KAFKA_RESP_ERR__TIMED_OUT ? .timedOut : code),
            message: [context, "\(name): \(text)"].compactMap { $0 }.joined(separator: ": "),
            rdKafkaCode: err.rawValue,
            isRetriable: isRetriable(err),
            isFatal: err == RD_KAFKA_RESP_ERR__FATAL
        )
    }

    /// The same, from a raw `rd_kafka_resp_err_t` value (for callers that do not import CKafka).
    static func make(rawCode: Int32, code: KafkaError.Code = .other, context: String? = nil) -> KafkaError {
        make(rd_kafka_resp_err_t(rawValue: rawCode), code: code, context: context)
    }

    /// Consumes (destroys) the `rd_kafka_error_t`.
    static func take(_ error: OpaquePointer, code: KafkaError.Code = .other, context: String? = nil) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        let err = rd_kafka_error_code(error)
        var result = make(err, code: code, context: context)
        if let s = rd_kafka_error_string(error) { result.message = [context, String(cString: s)].compactMap { $0 }.joined(separator: ": ") }
        result.isRetriable = rd_kafka_error_is_retriable(error) != 0 || isRetriable(err)
        result.isFatal = rd_kafka_error_is_fatal(error) != 0
        result.requiresAbort = rd_kafka_error_txn_requires_abort(error) != 0
        return result
    }

    /// Delivery errors that say the producer's own idempotence state is gone: the broker fenced
    /// its epoch, no longer knows its producer id, or lost its sequence (a broker restarted
    /// without that state, as tansu on S3 does). librdkafka does not raise them as fatal for an
    /// idempotent, non-transactional producer, and they never clear: every later record fails
    /// the same way while a new producer (a new id) delivers at once.
    static let producerStateCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR_PRODUCER_FENCED.rawValue, RD_KAFKA_RESP_ERR__FENCED.rawValue,
        RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID.rawValue, RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH.rawValue,
        RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING.rawValue, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER.rawValue,
        RD_KAFKA_RESP_ERR__FATAL.rawValue, RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE.rawValue,
    ]

    /// Group errors that say this member is no longer the one the coordinator knows: evicted
    /// (`UNKNOWN_MEMBER_ID`), replaced by another process with its `group.instance.id`
    /// (`FENCED_INSTANCE_ID`), or its assignment lost. Whatever it still holds is another
    /// member's now.
    static let fencedMemberCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID.rawValue, RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID.rawValue,
        RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST.rawValue,
    ]

    /// Delivery errors that no retry can cure: a message larger than `message.max.bytes` (librdkafka
    /// refuses it before sending; a broker with a lower `max.message.bytes` refuses it too), a
    /// batch too large, a record the broker finds invalid, a topic that cannot exist or that the
    /// client may not write.
    static let permanentDeliveryCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE.rawValue,
        RD_KAFKA_RESP_ERR_INVALID_RECORD.rawValue, RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION.rawValue,
        RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED.rawValue, RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED.rawValue,
        RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT.rawValue, RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS.rawValue,
        RD_KAFKA_RESP_ERR__INVALID_ARG.rawValue,
    ]

    /// `MSG_SIZE_TOO_LARGE`.
    static let messageTooLarge = RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue
    /// `UNKNOWN_PRODUCER_ID`.
    static let unknownProducerID = RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID.rawValue

    /// The group is rebalancing: `REBALANCE_IN_PROGRESS`, `ILLEGAL_GENERATION`.
    static let rebalancingCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS.rawValue, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION.rawValue,
    ]

    /// Local and broker errors that go away by themselves.
    static func isRetriable(_ err: rd_kafka_resp_err_t) -> Bool {
        switch err {
        case RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR__QUEUE_FULL,
            RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
            RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
            return true
        default:
            return false
        }
    }
}

/// The text librdkafka wrote into an `errstr` buffer.
func string(fromErrorBuffer buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
