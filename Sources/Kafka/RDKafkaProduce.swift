import CKafka

/// The last topic handle a sender used, by the topic's number in its batch: a batch mostly goes
/// to one topic, so the client's locked cache is consulted once per topic change, not once per
/// message, and the name is not copied out of the batch per message (a retain and a release of a
/// long name's storage). One cache serves one batch.
struct TopicHandleCache {
    private var topic: Int32 = -1
    private var rkt: OpaquePointer?

    init() {}

    mutating func handle(_ topic: Int32, of batch: ProducerBatch, in client: RDKafkaClient) -> OpaquePointer {
        if let rkt, self.topic == topic { return rkt }
        let handle = client.topicHandle(batch.topics[Int(topic)])
        self.topic = topic
        rkt = handle
        return handle
    }
}

/// A delivery report as read from librdkafka, before it is routed to its waiter: plain values
/// (no error value is made for the deliveries that succeeded, nearly all of them).
struct RDKafkaDelivery {
    var token: UInt64
    var partition: Int32
    var offset: Int64
    /// librdkafka's error code, `RD_KAFKA_RESP_ERR_NO_ERROR` when delivered.
    var err: rd_kafka_resp_err_t

    /// A record that failed before librdkafka took it; its error goes to `route` beside it.
    static func notEnqueued(token: UInt64) -> RDKafkaDelivery { RDKafkaDelivery(token: token, partition: -1, offset: -1, err: RD_KAFKA_RESP_ERR__FAIL) }

    /// The delivery's error, if it failed.
    var error: KafkaError? { err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : RDKafkaError.make(err, code: .delivery) }
}

extension RDKafkaClient {
    /// Enqueues record `index` of `batch` without blocking (`rd_kafka_produceva`; Swift cannot
    /// call the variadic `rd_kafka_producev`). `bytes` is the batch's buffer, opened once by the
    /// caller for all its records. librdkafka copies key and value (`RD_KAFKA_MSG_F_COPY`), so the
    /// buffer only needs to live for the call. `token` comes back in the delivery report.
    ///
    /// Returns `nil` when the message was enqueued.
    func produce(
        _ batch: ProducerBatch, index: Int, bytes: UnsafeRawBufferPointer, token: UInt64, topics: inout TopicHandleCache
    ) -> KafkaError? {
        let entry = batch.entries[index]
        let rkt = topics.handle(entry.topic, of: batch, in: self)
        func address(_ span: ProducerBatch.Span) -> UnsafeMutableRawPointer? { spanAddress(span, in: bytes) }
        var headers: OpaquePointer? = nil
        if entry.headerCount > 0 {
            let list = rd_kafka_headers_new(Int(entry.headerCount))!
            // By index: a slice of the list would retain and release its storage per record.
            for i in Int(entry.firstHeader)..<Int(entry.firstHeader + entry.headerCount) {
                let h = batch.headers[i]
                _ = rd_kafka_header_add(list, address(h.name)?.assumingMemoryBound(to: CChar.self), h.name.count, address(h.value), h.value.count)
            }
            headers = list
        }
        let error: OpaquePointer? = withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: 8) { vus in
            var n = 0
            func add(_ type: rd_kafka_vtype_t, _ fill: (inout rd_kafka_vu_t) -> Void) {
                var vu = rd_kafka_vu_t()
                vu.vtype = type
                fill(&vu)
                vus[n] = vu
                n += 1
            }
            add(RD_KAFKA_VTYPE_RKT) { $0.u.rkt = rkt }
            add(RD_KAFKA_VTYPE_PARTITION) { $0.u.i32 = entry.partition == Int32.min ? RD_KAFKA_PARTITION_UA : entry.partition }
            add(RD_KAFKA_VTYPE_MSGFLAGS) { $0.u.i = RD_KAFKA_MSG_F_COPY }
            add(RD_KAFKA_VTYPE_OPAQUE) { $0.u.ptr = UnsafeMutableRawPointer(bitPattern: UInt(token)) }
            if let value = address(entry.value) { add(RD_KAFKA_VTYPE_VALUE) { $0.u.mem = .init(ptr: value, size: entry.value.count) } }
            if let key = address(entry.key) { add(RD_KAFKA_VTYPE_KEY) { $0.u.mem = .init(ptr: key, size: entry.key.count) } }
            if entry.timestamp != Int64.min { add(RD_KAFKA_VTYPE_TIMESTAMP) { $0.u.i64 = entry.timestamp } }
            if let headers { add(RD_KAFKA_VTYPE_HEADERS) { $0.u.headers = headers } }
            return rd_kafka_produceva(handle, vus.baseAddress, n)
        }
        guard let error else { return nil }  // success: librdkafka owns the headers now
        // On failure the headers stay ours.
        if let headers { rd_kafka_headers_destroy(headers) }
        return RDKafkaError.take(error, code: .delivery, context: "produce to \(batch.topics[Int(entry.topic)])")
    }

    /// Enqueues records `range` of `batch` in one call (`rd_kafka_produce_batch`), in order:
    /// each must be a ``ProducerBatch/isPlain(_:)`` record of the topic of the first. One clock
    /// read, one topic lock and one C call for the run, where `rd_kafka_produceva` takes them per
    /// record; librdkafka copies keys and values as ``produce(_:index:bytes:token:topics:)`` has
    /// it do, and stamps them with the run's time. Record `i`'s token is `firstToken + i - range.lowerBound`.
    ///
    /// Hands every refused record but "queue full" to `failed`; returns the index of the first
    /// one refused because librdkafka's queue is full (those after it were refused too), or nil.
    func produceRun(
        _ batch: ProducerBatch, _ range: Range<Int>, bytes: UnsafeRawBufferPointer, firstToken: UInt64, topics: inout TopicHandleCache,
        failed: (Int, KafkaError) -> Void
    ) -> Int? {
        let rkt = topics.handle(batch.entries[range.lowerBound].topic, of: batch, in: self)
        // Chunks of at most 256: the message array lives on the stack (72 bytes each).
        return withUnsafeTemporaryAllocation(of: rd_kafka_message_t.self, capacity: Swift.min(range.count, 256)) { messages in
            var start = range.lowerBound
            while start < range.upperBound {
                let end = Swift.min(start + messages.count, range.upperBound)
                for i in start..<end {
                    let entry = batch.entries[i]
                    var m = rd_kafka_message_t()
                    m.partition = entry.partition == Int32.min ? RD_KAFKA_PARTITION_UA : entry.partition
                    m.payload = spanAddress(entry.value, in: bytes)
                    m.len = entry.value.count
                    m.key = spanAddress(entry.key, in: bytes)
                    m.key_len = entry.key.count
                    m._private = UnsafeMutableRawPointer(bitPattern: UInt(firstToken + UInt64(i - range.lowerBound)))
                    messages[i - start] = m
                }
                let count = end - start
                let enqueued = rd_kafka_produce_batch(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY | RD_KAFKA_MSG_F_PARTITION, messages.baseAddress, Int32(count))
                if enqueued < count {
                    for i in 0..<count where messages[i].err != RD_KAFKA_RESP_ERR_NO_ERROR {
                        if messages[i].err == RD_KAFKA_RESP_ERR__QUEUE_FULL { return start + i }
                        failed(start + i, RDKafkaError.make(messages[i].err, code: .delivery, context: "produce to \(batch.topics[Int(batch.entries[start + i].topic)])"))
                    }
                }
                start = end
            }
            return nil
        }
    }

    /// Serves the main queue once: waits up to `timeoutMilliseconds` for an event and hands
    /// delivery reports to `deliver` in one batch. Blocking: only the producer's poll thread calls it.
    /// Returns true when an event was served.
    @discardableResult
    func serveDeliveryReports(
        timeoutMilliseconds: Int32, into buffer: inout [RDKafkaDelivery], statistics: (KafkaStatistics) -> Void = { _ in },
        deliver: (inout [RDKafkaDelivery]) -> Void
    ) -> Bool {
        let queue = rd_kafka_queue_get_main(handle)!
        defer { rd_kafka_queue_destroy(queue) }
        guard let event = rd_kafka_queue_poll(queue, timeoutMilliseconds) else { return false }
        defer { rd_kafka_event_destroy(event) }
        switch rd_kafka_event_type(event) {
        case RD_KAFKA_EVENT_DR:
            buffer.removeAll(keepingCapacity: true)
            while let message = rd_kafka_event_message_next(event) {
                let m = message.pointee
                buffer.append(RDKafkaDelivery(token: UInt64(UInt(bitPattern: m._private)), partition: m.partition, offset: m.offset, err: m.err))
            }
            deliver(&buffer)
        case RD_KAFKA_EVENT_STATS:
            if let json = rd_kafka_event_stats(event), let stats = KafkaStatistics(json: Array(String(cString: json).utf8)) {
                statistics(stats)
            }
        case RD_KAFKA_EVENT_ERROR:
            let err = rd_kafka_event_error(event)
            let text = String(cString: rd_kafka_event_error_string(event))
            if rd_kafka_event_error_is_fatal(event) != 0 {
                logger.critical("fatal producer error: \(text)", metadata: ["code": "\(err.rawValue)"])
            } else {
                logger.warning("producer error: \(text)", metadata: ["code": "\(err.rawValue)"])
            }
        default:
            break
        }
        return true
    }

    /// `rd_kafka_flush`: waits until every enqueued message is delivered or failed. Blocking.
    func flush(timeoutMilliseconds: Int32) -> KafkaError? {
        let err = rd_kafka_flush(handle, timeoutMilliseconds)
        return err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : RDKafkaError.make(err, code: .timedOut, context: "flush")
    }

    /// Drops queued and in-flight messages; each gets a failed delivery report.
    func purge() {
        _ = rd_kafka_purge(handle, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
    }

    var outQueueLength: Int { Int(rd_kafka_outq_len(handle)) }

    /// Makes a `serveDeliveryReports` that is waiting return at once (`rd_kafka_queue_yield`),
    /// so stopping the poll thread does not wait out its poll timeout.
    func wakeDeliveryReportPoll() {
        let queue = rd_kafka_queue_get_main(handle)!
        defer { rd_kafka_queue_destroy(queue) }
        rd_kafka_queue_yield(queue)
    }

    static func enableDeliveryReportEvents(_ conf: OpaquePointer) {
        // Delivery reports and errors arrive as events on the main queue, polled by our thread,
        // instead of through C callbacks (the swift-kafka-client approach).
        rd_kafka_conf_set_events(conf, Int32(RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_STATS))
    }
}

/// Where a piece of a batch's record is in its buffer `bytes`: nil for none (a null key, a
/// tombstone), and a non-null address even for an empty piece (null means "none" to librdkafka).
@inline(__always)
private func spanAddress(_ span: ProducerBatch.Span, in bytes: UnsafeRawBufferPointer) -> UnsafeMutableRawPointer? {
    span.isNone ? nil : span.count == 0 ? UnsafeMutableRawPointer(mutating: emptyBytes) : UnsafeMutableRawPointer(mutating: bytes.baseAddress! + span.start)
}

/// A non-null address for empty keys and values: librdkafka treats a null pointer as "no value"
/// (a tombstone), so an empty value must still point somewhere.
// Allocated once and never written, so sharing it across threads is safe.
nonisolated(unsafe) private let emptyBytes = UnsafeRawPointer(UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1))
