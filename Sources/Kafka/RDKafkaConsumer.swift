import CKafka
import Foundation
import Logging
import Synchronization

/// What one `rd_kafka_consumer_poll` returned.
enum RDKafkaPolled {
    case record(ConsumerRecord)
    case endOfPartition(TopicPartitionOffset)
    case error(KafkaError)
}

/// What a rebalance callback reports.
enum RDKafkaRebalance {
    case assigned
    case revoked
    /// Taken away without a proper revocation (the session expired): the partitions may be
    /// someone else's already, so nothing of theirs can be committed.
    case lost
}

/// How the application wants newly assigned partitions started: from these offsets instead of
/// the committed ones, and these paused.
struct RDKafkaAssignmentAnswer {
    var starts: [TopicPartition: Int64] = [:]
    var paused: [TopicPartition] = []
}

/// Makes the assignment a rebalance callback is serving (once; the callback makes it with the
/// defaults if the handler did not).
final class RDKafkaPendingAssignment {
    private let rk: OpaquePointer
    private let partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    private let cooperative: Bool
    private(set) var made = false

    init(rk: OpaquePointer, partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, cooperative: Bool) {
        self.rk = rk
        self.partitions = partitions
        self.cooperative = cooperative
    }

    func make(_ answer: RDKafkaAssignmentAnswer) {
        guard !made else { return }
        made = true
        for (tp, offset) in answer.starts {
            rd_kafka_topic_partition_list_find(partitions, tp.topic, tp.partition)?.pointee.offset = offset
        }
        if cooperative {
            if let error = rd_kafka_incremental_assign(rk, partitions) { rd_kafka_error_destroy(error) }
        } else {
            _ = rd_kafka_assign(rk, partitions)
        }
        if !answer.paused.isEmpty {
            let paused = RDKafkaTopicPartitionList(answer.paused)
            _ = rd_kafka_pause_partitions(rk, paused.pointer)
        }
    }
}

/// Receives rebalances from librdkafka's rebalance callback. The callback runs on the consumer's
/// poll thread, inside `rd_kafka_consumer_poll`, and `handler` hands the event to the application
/// and waits until the application has taken it and asked for the next one. New partitions are
/// assigned after `handler` returns, from where the application said to start them (so it can
/// restore state first and resume where that state stands); revoked ones are given up after
/// it (so the application can finish and commit them first). Either way the rebalance
/// completes only when the callback returns.
final class RDKafkaRebalanceContext: @unchecked Sendable {
    // Set once, before the first poll, and read only by the poll thread afterwards. For an
    /// assignment the handler makes it (`assignment`) once the application has answered.
    var handler: (_ kind: RDKafkaRebalance, _ partitions: [TopicPartition], _ assignment: RDKafkaPendingAssignment?) -> Void = { _, _, a in a?.make(.init()) }
    /// The latest statistics (`statistics.interval.ms`), parsed on the poll thread.
    let statistics = Mutex<KafkaStatistics?>(nil)
    /// Assignment callbacks so far, empty ones included (the end of a rebalance).
    let assignments = Atomic<Int>(0)
}

/// librdkafka's statistics callback, served by `rd_kafka_consumer_poll` on the poll thread.
/// Returning 0 lets librdkafka free the JSON.
private func statisticsCallback(rk: OpaquePointer?, json: UnsafeMutablePointer<CChar>?, length: Int, opaque: UnsafeMutableRawPointer?) -> Int32 {
    guard let json, let opaque else { return 0 }
    let context = Unmanaged<RDKafkaRebalanceContext>.fromOpaque(opaque).takeUnretainedValue()
    let bytes = Array(UnsafeRawBufferPointer(start: json, count: length))
    if let stats = KafkaStatistics(json: bytes) { context.statistics.withLock { $0 = stats } }
    return 0
}

/// A file-private C function: Swift closures with context cannot be C callbacks.
private func rebalanceCallback(
    rk: OpaquePointer?,
    err: rd_kafka_resp_err_t,
    partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
    opaque: UnsafeMutableRawPointer?
) {
    guard let rk, let partitions, let opaque else { return }
    let context = Unmanaged<RDKafkaRebalanceContext>.fromOpaque(opaque).takeUnretainedValue()
    let list = RDKafkaTopicPartitionList.partitions(of: partitions)
    // NULL while the consumer closes (it is leaving the group): librdkafka then expects the
    // eager calls (a crash here, found by `pipelinectl chaos`, took a closing worker down).
    let cooperative = rd_kafka_rebalance_protocol(rk).map { String(cString: $0) } == "COOPERATIVE"
    switch err {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        context.assignments.add(1)
        let assignment = RDKafkaPendingAssignment(rk: rk, partitions: partitions, cooperative: cooperative)
        // The cooperative protocol also calls back with nothing new: no event for that.
        if !list.isEmpty { context.handler(.assigned, list, assignment) }
        assignment.make(.init())
    default:  // RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS or an error: give everything up
        if !list.isEmpty { context.handler(rd_kafka_assignment_lost(rk) != 0 ? .lost : .revoked, list, nil) }
        if cooperative {
            if let error = rd_kafka_incremental_unassign(rk, partitions) { rd_kafka_error_destroy(error) }
        } else {
            _ = rd_kafka_assign(rk, nil)
        }
    }
}

/// The consumer side of an `RDKafkaClient`.
final class RDKafkaConsumer: @unchecked Sendable {  // immutable after init; librdkafka is thread-safe
    let client: RDKafkaClient
    let rebalance: RDKafkaRebalanceContext
    private let retainedContext: Unmanaged<RDKafkaRebalanceContext>
    /// The consumer queue (`rd_kafka_queue_get_consumer`), owned here, destroyed in deinit.
    private let consumerQueue: OpaquePointer
    /// `rd_kafka_message_leader_epoch` (librdkafka 2.1+; the package compiles against Debian's
    /// 2.0.2 headers, which lack it), looked up in the runtime actually loaded; nil without it.
    /// Used only by ``hasNoHeaders(_:)``, so nil also where that shortcut is not verified.
    private let messageLeaderEpoch: (@convention(c) (UnsafeMutablePointer<rd_kafka_message_t>) -> Int32)? = {
        guard KafkaRuntime.headerShortcutVerified(version: KafkaRuntime.version),
            let symbol = dlsym(dlopen(nil, RTLD_NOW), "rd_kafka_message_leader_epoch")
        else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<rd_kafka_message_t>) -> Int32).self)
    }()

    init(properties: [String: String], logger: Logger) throws(KafkaError) {
        let context = RDKafkaRebalanceContext()
        // Balanced by `release()` in deinit, after rd_kafka_destroy can no longer call back.
        let retained = Unmanaged.passRetained(context)
        do {
            client = try RDKafkaClient(kind: .consumer, properties: properties, logger: logger) { conf in
                rd_kafka_conf_set_opaque(conf, retained.toOpaque())
                rd_kafka_conf_set_rebalance_cb(conf, rebalanceCallback)
                rd_kafka_conf_set_stats_cb(conf, statisticsCallback)
            }
        } catch {
            retained.release()
            throw error
        }
        rebalance = context
        retainedContext = retained
        // Serve the main queue (errors, rebalances) from rd_kafka_consumer_poll.
        rd_kafka_poll_set_consumer(client.handle)
        consumerQueue = rd_kafka_queue_get_consumer(client.handle)
    }

    deinit {
        destroy()
        // rd_kafka_t is gone: the rebalance callback cannot fire any more.
        retainedContext.release()
    }

    /// Makes a waiting `poll` return at once (`rd_kafka_queue_yield`), so closing does not wait
    /// out the poll timeout. Safe from any thread; does nothing once destroyed.
    func wakePoll() {
        _ = try? client.using { rd_kafka_queue_yield(consumerQueue) }
    }

    /// Destroys the consumer queue, then the client (queues must go before `rd_kafka_destroy`).
    /// Blocking. Only the poll thread (after it stopped polling) and deinit call it.
    func destroy() {
        client.destroy { rd_kafka_queue_destroy(consumerQueue) }
    }

    func subscribe(_ topics: [String]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(capacity: topics.count)
        for topic in topics { list.add(topic, RD_KAFKA_PARTITION_UA, offset: nil) }
        let err = rd_kafka_subscribe(client.handle, list.pointer)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "subscribe to \(topics)") }
    }

    /// What the poll thread reuses from record to record instead of allocating it again: the
    /// topic's name and recent keys. Poll thread only.
    ///
    /// The last topic name converted, so most records of a batch reuse one `String`. Across
    /// calls it is keyed by the name's bytes, not by the `rd_kafka_topic_t` pointer: a pointer
    /// we hold no reference on can be freed and reused for another topic. Within one batch
    /// (``beginBatch()``) the pointer is enough: every message of a batch holds a reference on
    /// its topic until it is destroyed, and all of them are alive when the batch is returned, so
    /// two messages of one batch with the same pointer have the same topic.
    ///
    /// Keys repeat (an entity's key on each of its records: a market's on every tick), so the
    /// last 64 distinct short keys are kept by a hash of their bytes; a key equal to the one in
    /// its slot shares that array (compared byte for byte, so a collision only costs a copy).
    struct ConversionCache {
        private var last: String?
        private var lastBytes: [CChar] = []
        private var batchTopic: OpaquePointer?
        private var keys = [[UInt8]](repeating: [], count: Self.keySlots)
        private static let keySlots = 64
        private static let maxCachedKey = 64

        mutating func beginBatch() { batchTopic = nil }

        /// The key's bytes as an array, shared with an earlier record's equal key when cached.
        mutating func key(_ bytes: UnsafeRawPointer, count: Int) -> [UInt8] {
            guard count > 0 else { return [] }
            let source = UnsafeRawBufferPointer(start: bytes, count: count)
            guard count <= Self.maxCachedKey else { return Array(source) }
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a
            for byte in source { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            let slot = Int(truncatingIfNeeded: hash % UInt64(Self.keySlots))
            if keys[slot].count == count, keys[slot].withUnsafeBytes({ memcmp($0.baseAddress!, bytes, count) == 0 }) { return keys[slot] }
            let fresh = Array(source)
            keys[slot] = fresh
            return fresh
        }

        mutating func name(_ rkt: OpaquePointer) -> String {
            if rkt == batchTopic, let last { return last }
            let cName = rd_kafka_topic_name(rkt)!
            if let last, lastBytes.withUnsafeBufferPointer({ strcmp($0.baseAddress!, cName) == 0 }) {
                batchTopic = rkt
                return last
            }
            let name = String(cString: cName)
            last = name
            lastBytes = Array(name.utf8CString)
            batchTopic = rkt
            return name
        }
    }

    /// `rd_kafka_assign`: reads exactly these partitions from these offsets (no group
    /// membership, nothing committed unless the application commits). Empty: unassign.
    func assign(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        let err: rd_kafka_resp_err_t
        if offsets.isEmpty {
            err = rd_kafka_assign(client.handle, nil)
        } else {
            let list = RDKafkaTopicPartitionList(offsets)
            err = rd_kafka_assign(client.handle, list.pointer)
        }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "assign \(offsets)") }
    }

    /// One `rd_kafka_consumer_poll`. Blocking up to the timeout: only the poll thread calls it.
    func poll(timeoutMilliseconds: Int32, names: inout ConversionCache) -> RDKafkaPolled? {
        guard let message = rd_kafka_consumer_poll(client.handle, timeoutMilliseconds) else { return nil }
        defer { rd_kafka_message_destroy(message) }
        names.beginBatch()
        return convert(message, names: &names)
    }

    /// Takes up to `limit` messages that are already fetched, without waiting
    /// (`rd_kafka_consume_batch_queue` with timeout 0: one queue lock for the lot). Each record
    /// is handed to `record` in a slot that `record` must move it out of (`move()`); anything
    /// else is handed to `other`, in order. Returns how many messages were taken. Only the poll
    /// thread calls it.
    ///
    /// The sinks run after `rd_kafka_consume_batch_queue` returned, never during it: librdkafka
    /// may serve the rebalance callback inside that call, and the callback may touch whatever
    /// the sinks append to.
    func drainFetched(limit: Int, names: inout ConversionCache, record: (UnsafeMutablePointer<ConsumerRecord>) -> Void, other: (RDKafkaPolled) -> Void) -> Int {
        guard limit > 0 else { return 0 }
        return withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<rd_kafka_message_t>?.self, capacity: limit) { buffer in
            let n = rd_kafka_consume_batch_queue(consumerQueue, 0, buffer.baseAddress, limit)
            guard n > 0 else { return 0 }
            names.beginBatch()
            // Every record's value is copied into one buffer for the lot, and each record holds a
            // slice of it: one allocation (and, once the last record is released, one free) per
            // drain instead of one per record.
            func isRecord(_ i: Int) -> Bool { buffer[i].map { $0.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR } ?? false }
            var total = 0
            for i in 0..<n where isRecord(i) && buffer[i]!.pointee.payload != nil { total += buffer[i]!.pointee.len }
            let values = [UInt8](unsafeUninitializedCapacity: total) { out, written in
                written = 0
                for i in 0..<n where isRecord(i) {
                    let m = buffer[i]!.pointee
                    guard let payload = m.payload, m.len > 0 else { continue }
                    (out.baseAddress! + written).update(from: payload.assumingMemoryBound(to: UInt8.self), count: m.len)
                    written += m.len
                }
            }
            // Each record is made in a slot on the stack and `record` moves it out: handed to the
            // closure as a value, even a `consuming` one, it was copied for the call (a retain and
            // a release of each of its references) and the original destroyed.
            return withUnsafeTemporaryAllocation(of: ConsumerRecord.self, capacity: 1) { slots in
                let slot = slots.baseAddress!
                var at = 0
                for i in 0..<n {
                    guard let message = buffer[i] else { continue }
                    defer { rd_kafka_message_destroy(message) }
                    if isRecord(i) {
                        let m = message.pointee
                        var value: ArraySlice<UInt8>?
                        if m.payload != nil {
                            value = values[at..<(at + m.len)]
                            at += m.len
                        }
                        slot.initialize(to: convertRecord(message, value: value, names: &names))
                        record(slot)
                    } else {
                        other(convert(message, names: &names))
                    }
                }
                return n
            }
        }
    }

    /// Copies key, value and headers out of a message (which the caller then destroys).
    private func convert(_ message: UnsafeMutablePointer<rd_kafka_message_t>, names: inout ConversionCache) -> RDKafkaPolled {
        let m = message.pointee
        let topic = m.rkt.map { names.name($0) } ?? ""
        switch m.err {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            break
        case RD_KAFKA_RESP_ERR__PARTITION_EOF:
            return .endOfPartition(TopicPartitionOffset(topic, m.partition, offset: m.offset))
        default:
            var error = RDKafkaError.make(m.err, code: .broker, context: topic.isEmpty ? "consumer" : "consumer \(topic)[\(m.partition)]")
            if let payload = m.payload, m.len > 0 {
                error.message += ": " + String(decoding: UnsafeRawBufferPointer(start: payload, count: m.len), as: UTF8.self)
            }
            if m.err == RD_KAFKA_RESP_ERR__FATAL { error.isFatal = true }
            return .error(error)
        }
        return .record(convertRecord(message, value: m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len))[...] }, names: &names))
    }

    /// True when a consumed message certainly has no headers, found without
    /// `rd_kafka_message_headers`, which (librdkafka 2.16) allocates and frees a parse buffer and
    /// a header list for every message that has none: a quarter of the poll thread's time when
    /// reading 200-byte records (`perf record` of `pipelinectl perf consume --assign`).
    ///
    /// In a v2 record the header count (a varint, one 0 byte when there are no headers) follows
    /// the value, and librdkafka's message points into the fetched record
    /// (`rd_kafka_msgset_reader_msg_v2`: payload and the unparsed headers are consecutive
    /// pointers into one contiguous response buffer). So for a v2 record with a non-empty value
    /// the byte after the value is that count. Everything else goes the documented way:
    /// - a null or empty value (librdkafka points an empty one at a static "", not the record);
    /// - a message not known to come from a v2 batch: only v2 batches carry a partition leader
    ///   epoch, so an epoch of -1 (v0/v1 message sets, or a runtime without
    ///   `rd_kafka_message_leader_epoch`) means "don't know". (librdkafka keeps the last v2
    ///   batch's epoch for v0/v1 sets that follow it in the same fetch; a partition's log goes
    ///   back from v2 to v0/v1 only on a pre-3.0 broker whose `message.format.version` was
    ///   lowered. Even then the answer is right, as v0/v1 records have no headers; the byte read
    ///   is the next record's, past the buffer only for the very last record of a response.)
    ///
    /// This reads librdkafka's memory layout, not its API, so it is used only on the librdkafka
    /// releases it was verified on (``KafkaRuntime/headerShortcutVerified(version:)``); any other
    /// runtime asks `rd_kafka_message_headers` for every record. `MockClusterTests.headersSurviveMixedWithRecordsWithoutThem` fails if a
    /// header is ever lost, on whichever runtime the tests load.
    @inline(__always)
    private func hasNoHeaders(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> Bool {
        let m = message.pointee
        guard let payload = m.payload, m.len > 0, let leaderEpoch = messageLeaderEpoch, leaderEpoch(message) >= 0 else { return false }
        return payload.load(fromByteOffset: m.len, as: UInt8.self) == 0
    }

    /// Copies key and headers out of a message without error (which the caller then destroys);
    /// `value` is its value, already copied.
    @inline(__always)
    private func convertRecord(
        _ message: UnsafeMutablePointer<rd_kafka_message_t>, value: ArraySlice<UInt8>?, names: inout ConversionCache
    ) -> ConsumerRecord {
        let m = message.pointee
        let topic = m.rkt.map { names.name($0) } ?? ""
        var headers: [KafkaHeader] = []
        var hdrs: OpaquePointer?
        if !hasNoHeaders(message), rd_kafka_message_headers(message, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR, let hdrs {
            var index = 0
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(hdrs, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(KafkaHeader(
                    key: name.map { String(cString: $0) } ?? "",
                    value: value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        return ConsumerRecord(
            topic: topic,
            partition: m.partition,
            offset: m.offset,
            key: m.key.map { names.key($0, count: m.key_len) },
            sharing: value,
            headers: headers,
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp)
    }

    /// `rd_kafka_offsets_store`: marks offsets (the next to read) for the next commit. Non-blocking.
    func store(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(offsets)
        let err = rd_kafka_offsets_store(client.handle, list.pointer)
        if let error = list.firstError(context: "store offset") { throw error }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "store offsets") }
    }

    /// `rd_kafka_commit` (synchronous). Commits the given offsets, or all stored ones. Blocking.
    func commit(_ offsets: [TopicPartitionOffset]?) throws(KafkaError) {
        let list = offsets.map { RDKafkaTopicPartitionList($0) }
        let err = rd_kafka_commit(client.handle, list?.pointer, 0)
        // Nothing stored since the last commit: not an error.
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET else {
            throw RDKafkaError.make(err, code: .broker, context: "commit")
        }
        if let error = list?.firstError(context: "commit") { throw error }
    }

    /// `rd_kafka_commit_queue` on a queue of its own, waited for in slices of at most 100 ms:
    /// commits the given offsets (or all stored ones) and returns the broker's answer, or throws
    /// ``KafkaError/Code/timedOut`` after `timeoutMilliseconds` and ``KafkaError/Code/cancelled``
    /// once `cancelled()` says so. (`rd_kafka_commit` waits for ever on a coordinator that does
    /// not answer.) A commit given up is still sent; its answer is dropped with the queue.
    /// Blocking.
    func commit(_ offsets: [TopicPartitionOffset]?, timeoutMilliseconds: Int32, cancelled: () -> Bool) throws(KafkaError) {
        let list = offsets.map { RDKafkaTopicPartitionList($0) }
        let queue = rd_kafka_queue_new(client.handle)!
        defer { rd_kafka_queue_destroy(queue) }
        let err = rd_kafka_commit_queue(client.handle, list?.pointer, queue, nil, nil)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "commit") }
        let giveUp = ContinuousClock.now + .milliseconds(Int64(timeoutMilliseconds))
        while true {
            if cancelled() { throw KafkaError(code: .cancelled, message: "commit: given up unanswered (cancelled)") }
            let left = giveUp - .now
            guard left > .zero else { throw KafkaError.timedOut("a commit unanswered for \(timeoutMilliseconds) ms") }
            guard let event = rd_kafka_queue_poll(queue, min(100, left.timeoutMilliseconds)) else { continue }
            defer { rd_kafka_event_destroy(event) }
            guard rd_kafka_event_type(event) == RD_KAFKA_EVENT_OFFSET_COMMIT else { continue }
            let err = rd_kafka_event_error(event)
            // Nothing stored since the last commit: not an error.
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET else {
                throw RDKafkaError.make(err, code: .broker, context: "commit")
            }
            if let answered = rd_kafka_event_topic_partition_list(event) {
                for i in 0..<Int(answered.pointee.cnt) {
                    let e = answered.pointee.elems[i]
                    if e.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                        throw RDKafkaError.make(e.err, code: .broker, context: "commit \(String(cString: e.topic))[\(e.partition)]")
                    }
                }
            }
            return
        }
    }

    /// `rd_kafka_committed`: the group's committed offsets (the next to read; -1001 when none). Blocking.
    func committed(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList(partitions)
        let err = rd_kafka_committed(client.handle, list.pointer, timeoutMilliseconds)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "committed offsets") }
        return list.offsets
    }

    /// `rd_kafka_position`: the next offset this consumer will read per partition. Non-blocking.
    func position(_ partitions: [TopicPartition]) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList(partitions)
        let err = rd_kafka_position(client.handle, list.pointer)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "position") }
        return list.offsets
    }

    func assignment() throws(KafkaError) -> [TopicPartition] {
        var pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        let err = rd_kafka_assignment(client.handle, &pointer)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let pointer else { throw RDKafkaError.make(err, code: .broker, context: "assignment") }
        return RDKafkaTopicPartitionList(owning: pointer).partitions
    }

    func pause(_ partitions: [TopicPartition]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(partitions)
        let err = rd_kafka_pause_partitions(client.handle, list.pointer)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "pause") }
        if let error = list.firstError(context: "pause") { throw error }
    }

    func resume(_ partitions: [TopicPartition]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(partitions)
        let err = rd_kafka_resume_partitions(client.handle, list.pointer)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "resume") }
        if let error = list.firstError(context: "resume") { throw error }
    }

    /// `rd_kafka_consumer_close`: revokes the assignment (through the rebalance callback) and
    /// leaves the group. Blocking.
    func close() throws(KafkaError) {
        let err = rd_kafka_consumer_close(client.handle)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "close") }
    }

    /// The cached high watermark from the last fetch response (no broker round trip).
    func cachedWatermarks(_ tp: TopicPartition) -> (low: Int64, high: Int64)? {
        var low: Int64 = -1
        var high: Int64 = -1
        let err = rd_kafka_get_watermark_offsets(client.handle, tp.topic, tp.partition, &low, &high)
        return err == RD_KAFKA_RESP_ERR_NO_ERROR ? (low, high) : nil
    }
}
