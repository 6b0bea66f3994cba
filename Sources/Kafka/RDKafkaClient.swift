import CKafka
import Foundation
import Logging
import Synchronization

/// Owns one `rd_kafka_t` (producer or consumer) and destroys it in `deinit`.
///
/// librdkafka handles are thread-safe; this wrapper only adds the log queue and cached topic
/// handles, both behind a lock, which is why it is `@unchecked Sendable`.
package final class RDKafkaClient: @unchecked Sendable {
    package enum Kind { case producer, consumer }

    package let handle: OpaquePointer
    let kind: Kind
    let logger: Logger
    private let logQueue: OpaquePointer
    private let topics = Mutex<[String: OpaquePointer]>([:])
    private let lifetime = HandleLifetime()

    /// - Parameter configure: called with the `rd_kafka_conf_t` before the client is created,
    ///   to register callbacks or event masks.
    package init(kind: Kind, properties: [String: String], logger: Logger, configure: (OpaquePointer) -> Void = { _ in }) throws(KafkaError) {
        try KafkaRuntime.check(environment: ProcessInfo.processInfo.environment)
        var properties = properties
        // Logs go to a queue we drain into swift-log instead of librdkafka's stderr printer.
        properties["log.queue"] = "true"
        let conf = try RDKafkaConfig.make(properties)
        configure(conf)
        var errstr = [CChar](repeating: 0, count: 512)
        // rd_kafka_new takes ownership of conf only on success.
        guard let rk = rd_kafka_new(kind == .producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            let reason = string(fromErrorBuffer: errstr)
            throw KafkaError(code: .invalidConfiguration, message: "could not create the Kafka client: \(reason)")
        }
        self.handle = rk
        self.kind = kind
        self.logger = logger
        self.logQueue = rd_kafka_queue_new(rk)
        rd_kafka_set_log_queue(rk, logQueue)
    }

    deinit { destroy() }

    /// Runs `body` unless the client is destroyed (then throws ``KafkaError/closed``); `destroy`
    /// waits for running bodies. The public API wraps its calls in this so that a call racing a
    /// close gets an error instead of a freed handle.
    func using<T>(_ body: () throws(KafkaError) -> T) throws(KafkaError) -> T {
        guard lifetime.enter() else { throw KafkaError.closed }
        defer { lifetime.leave() }
        return try body()
    }

    /// Destroys the `rd_kafka_t` (once; later calls return at once). Blocking: librdkafka stops
    /// its threads. Clients are destroyed explicitly by `close()`, before the program can exit:
    /// a process that exits while librdkafka is being torn down can crash in its bundled OpenSSL.
    /// - Parameter destroyQueues: destroys queues the caller owns; it runs after in-flight
    ///   ``using(_:)`` calls have finished and before `rd_kafka_destroy` (queues must go first).
    package func destroy(destroyQueues: () -> Void = {}) {
        guard lifetime.endAndWait() else { return }
        destroyQueues()
        for (_, rkt) in topics.withLock({ $0 }) { rd_kafka_topic_destroy(rkt) }
        rd_kafka_queue_destroy(logQueue)
        rd_kafka_destroy(handle)
    }

    /// The unscoped form of ``using(_:)`` for a hot loop: pair every true result with ``leaveUse()``.
    func enterUse() -> Bool { lifetime.enter() }
    func leaveUse() { lifetime.leave() }

    var name: String { String(cString: rd_kafka_name(handle)) }

    /// A cached `rd_kafka_topic_t` (destroyed with the client), so producing does not
    /// convert the topic name for every message.
    func topicHandle(_ topic: String) -> OpaquePointer {
        topics.withLock { cache in
            if let rkt = cache[topic] { return rkt }
            let rkt = rd_kafka_topic_new(handle, topic, nil)!
            cache[topic] = rkt
            return rkt
        }
    }

    /// The signature of librdkafka's queue wake-up callback (`rd_kafka_queue_cb_event_enable`).
    typealias QueueWakeUp = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void

    /// Has librdkafka call `wakeUp(_, context)` whenever the main queue (delivery reports,
    /// errors, statistics) or the log queue goes from empty to not empty
    /// (`rd_kafka_queue_cb_event_enable`). It is called on librdkafka's threads with the queue
    /// locked, so it must only hand work elsewhere and never call librdkafka. nil turns it off;
    /// once that returns, no call is running or will start.
    func wakeWhenQueued(_ wakeUp: QueueWakeUp?, context: UnsafeMutableRawPointer?) {
        let main = rd_kafka_queue_get_main(handle)!
        defer { rd_kafka_queue_destroy(main) }
        rd_kafka_queue_cb_event_enable(main, wakeUp, context)
        rd_kafka_queue_cb_event_enable(logQueue, wakeUp, context)
    }

    /// Forwards queued librdkafka log lines to swift-log. Non-blocking.
    func drainLogs() {
        while let event = rd_kafka_queue_poll(logQueue, 0) {
            defer { rd_kafka_event_destroy(event) }
            guard rd_kafka_event_type(event) == RD_KAFKA_EVENT_LOG else { continue }
            var facility: UnsafePointer<CChar>?
            var text: UnsafePointer<CChar>?
            var level: Int32 = 0
            guard rd_kafka_event_log(event, &facility, &text, &level) == 0, let text else { continue }
            let message = "\(facility.map { String(cString: $0) } ?? "rdkafka"): \(String(cString: text))"
            // syslog levels: 0-3 error, 4 warning, 5-6 info/notice, 7 debug
            switch level {
            case ...3: logger.error("\(message)", metadata: ["client": "\(name)"])
            case 4: logger.warning("\(message)", metadata: ["client": "\(name)"])
            case 5...6: logger.info("\(message)", metadata: ["client": "\(name)"])
            default: logger.debug("\(message)", metadata: ["client": "\(name)"])
            }
        }
    }

    /// `rd_kafka_test_fatal_error`: raises a fatal error as if the broker had caused it (fault
    /// injection for tests and the chaos verifier).
    func raiseFatalError(rawCode: Int32, reason: String) {
        _ = rd_kafka_test_fatal_error(handle, rd_kafka_resp_err_t(rawValue: rawCode), reason)
    }

    /// The fatal error that made the client unusable, if any.
    func fatalError() -> KafkaError? {
        var errstr = [CChar](repeating: 0, count: 512)
        let err = rd_kafka_fatal_error(handle, &errstr, errstr.count)
        guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        var error = RDKafkaError.make(err, code: .broker)
        error.message = string(fromErrorBuffer: errstr)
        error.isFatal = true
        return error
    }

    /// `rd_kafka_query_watermark_offsets`: asks the partition leader. Blocking: call from a
    /// ``BlockingExecutor``.
    func queryWatermarks(_ tp: TopicPartition, timeoutMilliseconds: Int32) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = -1
        var high: Int64 = -1
        let err = rd_kafka_query_watermark_offsets(handle, tp.topic, tp.partition, &low, &high, timeoutMilliseconds)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "watermarks of \(tp)") }
        return (low, high)
    }

    /// Topic metadata. Blocking.
    func metadata(topic: String?, timeoutMilliseconds: Int32) throws(KafkaError) -> [(name: String, partitions: Int, error: KafkaError?)] {
        var md: UnsafePointer<rd_kafka_metadata>?
        let err: rd_kafka_resp_err_t
        if let topic {
            let rkt = topicHandle(topic)
            err = rd_kafka_metadata(handle, 0, rkt, &md, timeoutMilliseconds)
        } else {
            err = rd_kafka_metadata(handle, 1, nil, &md, timeoutMilliseconds)
        }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let md else { throw RDKafkaError.make(err, code: .broker, context: "metadata") }
        defer { rd_kafka_metadata_destroy(md) }
        return (0..<Int(md.pointee.topic_cnt)).map { i in
            let t = md.pointee.topics[i]
            let error = t.err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : RDKafkaError.make(t.err, code: .broker, context: "topic \(String(cString: t.topic))")
            return (String(cString: t.topic), Int(t.partition_cnt), error)
        }
    }
}

/// Counts calls inside ``RDKafkaClient/using(_:)`` so that destruction waits for them.
private final class HandleLifetime: @unchecked Sendable {  // all state behind `condition`
    private let condition = NSCondition()
    private var users = 0
    private var ended = false

    func enter() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return false }
        users += 1
        return true
    }

    func leave() {
        condition.lock()
        users -= 1
        if users == 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Marks the end and waits for current users. True for the first caller only.
    func endAndWait() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return false }
        ended = true
        while users > 0 { condition.wait() }
        return true
    }
}
