import CKafka

/// Admin requests over an `RDKafkaClient`. Each call blocks on a private result queue until the
/// answer arrives or the timeout passes: call only from a ``BlockingExecutor``.
struct RDKafkaAdmin {
    let client: RDKafkaClient

    /// Requests librdkafka sends to a group's coordinator (`rd_kafka_coord_req`). librdkafka 2.16
    /// must not time one out while it waits for the coordinator: it frees the request's state
    /// then, and touches it again once the coordinator is back, which aborts the process
    /// (`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'`, librdkafka#4605,
    /// the fix proposed in #5397). So librdkafka gets the longest timeout it takes for them,
    /// the wait here is the caller's, and a request not answered within it is abandoned with
    /// its handle (``KafkaAdmin`` replaces the handle and destroys it, which ends the request
    /// cleanly).
    static func goesToCoordinator(_ op: rd_kafka_admin_op_t) -> Bool {
        switch op {
        case RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS, RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS,
             RD_KAFKA_ADMIN_OP_DELETECONSUMERGROUPOFFSETS, RD_KAFKA_ADMIN_OP_DELETEGROUPS:
            true
        default:
            false
        }
    }

    /// The longest request timeout librdkafka accepts (`rd_kafka_AdminOptions_set_request_timeout`).
    static let longestRequestTimeout: Int32 = 3_600_000

    /// Runs one admin request and hands its result event to `read` (also for `RDKafkaGroupAdmin`).
    /// A request to a group's coordinator that is not answered within `timeoutMilliseconds`
    /// throws ``KafkaError/Code/timedOut`` and stays with the handle (see ``goesToCoordinator(_:)``).
    func request<T>(
        _ op: rd_kafka_admin_op_t,
        timeoutMilliseconds: Int32,
        what: String,
        start: (OpaquePointer /* options */, OpaquePointer /* queue */) -> Void,
        read: (OpaquePointer /* event */) throws(KafkaError) -> T
    ) throws(KafkaError) -> T {
        let queue = rd_kafka_queue_new(client.handle)!
        defer { rd_kafka_queue_destroy(queue) }
        let options = rd_kafka_AdminOptions_new(client.handle, op)!
        defer { rd_kafka_AdminOptions_destroy(options) }
        var errstr = [CChar](repeating: 0, count: 256)
        let coordinated = Self.goesToCoordinator(op)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, coordinated ? Self.longestRequestTimeout : timeoutMilliseconds, &errstr, errstr.count)
        start(options, queue)
        // Otherwise the request itself times out after timeoutMilliseconds; allow a little more for the event.
        guard let event = rd_kafka_queue_poll(queue, coordinated ? timeoutMilliseconds : timeoutMilliseconds + 1000) else {
            throw KafkaError.timedOut(coordinated ? "\(what) (no answer from the group's coordinator)" : what)
        }
        defer { rd_kafka_event_destroy(event) }
        let err = rd_kafka_event_error(event)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            var error = RDKafkaError.make(err, code: .admin, context: what)
            if let s = rd_kafka_event_error_string(event) { error.message = "\(what): \(String(cString: s))" }
            throw error
        }
        return try read(event)
    }

    private func topicResults(_ results: UnsafeMutablePointer<OpaquePointer?>?, count: Int, what: String, tolerate: rd_kafka_resp_err_t) throws(KafkaError) {
        guard let results else { return }
        for i in 0..<count {
            guard let r = results[i] else { continue }
            let err = rd_kafka_topic_result_error(r)
            guard err != RD_KAFKA_RESP_ERR_NO_ERROR, err != tolerate else { continue }
            var error = RDKafkaError.make(err, code: .admin, context: "\(what) \(String(cString: rd_kafka_topic_result_name(r)))")
            if let s = rd_kafka_topic_result_error_string(r) { error.message += ": \(String(cString: s))" }
            throw error
        }
    }

    func createTopic(_ spec: TopicSpec, ignoreExisting: Bool, timeoutMilliseconds: Int32) throws(KafkaError) {
        var errstr = [CChar](repeating: 0, count: 512)
        guard let newTopic = rd_kafka_NewTopic_new(spec.name, Int32(spec.partitions), Int32(spec.replicationFactor), &errstr, errstr.count) else {
            throw KafkaError(code: .admin, message: "invalid topic \(spec.name): \(string(fromErrorBuffer: errstr))")
        }
        defer { rd_kafka_NewTopic_destroy(newTopic) }
        for (key, value) in spec.config.sorted(by: { $0.key < $1.key }) {
            let err = rd_kafka_NewTopic_set_config(newTopic, key, value)
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .admin, context: "topic config \(key)") }
        }
        try request(RD_KAFKA_ADMIN_OP_CREATETOPICS, timeoutMilliseconds: timeoutMilliseconds, what: "create topic \(spec.name)") { options, queue in
            var topics: [OpaquePointer?] = [newTopic]
            rd_kafka_CreateTopics(client.handle, &topics, 1, options, queue)
        } read: { (event) throws(KafkaError) in
            var count = 0
            let results = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event), &count)
            try topicResults(UnsafeMutablePointer(mutating: results), count: count, what: "create topic",
                             tolerate: ignoreExisting ? RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS : RD_KAFKA_RESP_ERR_NO_ERROR)
        }
    }

    func deleteTopic(_ name: String, timeoutMilliseconds: Int32) throws(KafkaError) {
        let deleteTopic = rd_kafka_DeleteTopic_new(name)!
        defer { rd_kafka_DeleteTopic_destroy(deleteTopic) }
        try request(RD_KAFKA_ADMIN_OP_DELETETOPICS, timeoutMilliseconds: timeoutMilliseconds, what: "delete topic \(name)") { options, queue in
            var topics: [OpaquePointer?] = [deleteTopic]
            rd_kafka_DeleteTopics(client.handle, &topics, 1, options, queue)
        } read: { (event) throws(KafkaError) in
            var count = 0
            let results = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(event), &count)
            try topicResults(UnsafeMutablePointer(mutating: results), count: count, what: "delete topic", tolerate: RD_KAFKA_RESP_ERR_NO_ERROR)
        }
    }

    /// A topic's configuration entries (e.g. `cleanup.policy`).
    func describeTopicConfig(_ name: String, timeoutMilliseconds: Int32) throws(KafkaError) -> [String: String] {
        let resource = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, name)!
        defer { rd_kafka_ConfigResource_destroy(resource) }
        return try request(RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, timeoutMilliseconds: timeoutMilliseconds, what: "describe topic \(name)") { options, queue in
            var resources: [OpaquePointer?] = [resource]
            rd_kafka_DescribeConfigs(client.handle, &resources, 1, options, queue)
        } read: { (event) throws(KafkaError) in
            var count = 0
            guard let resources = rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(event), &count) else { return [:] }
            var entries: [String: String] = [:]
            for i in 0..<count {
                guard let r = resources[i] else { continue }
                let err = rd_kafka_ConfigResource_error(r)
                guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .admin, context: "describe topic \(name)") }
                var n = 0
                guard let configs = rd_kafka_ConfigResource_configs(r, &n) else { continue }
                for j in 0..<n {
                    guard let entry = configs[j], let key = rd_kafka_ConfigEntry_name(entry) else { continue }
                    entries[String(cString: key)] = rd_kafka_ConfigEntry_value(entry).map { String(cString: $0) }
                }
            }
            return entries
        }
    }

    /// The committed offsets of a group (all its partitions when `partitions` is nil).
    func committedOffsets(group: String, partitions: [TopicPartition]?, timeoutMilliseconds: Int32) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = partitions.map { RDKafkaTopicPartitionList($0) }
        let query = rd_kafka_ListConsumerGroupOffsets_new(group, list?.pointer)!
        defer { rd_kafka_ListConsumerGroupOffsets_destroy(query) }
        return try request(RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, timeoutMilliseconds: timeoutMilliseconds, what: "committed offsets of group \(group)") { options, queue in
            var queries: [OpaquePointer?] = [query]
            rd_kafka_ListConsumerGroupOffsets(client.handle, &queries, 1, options, queue)
        } read: { (event) throws(KafkaError) in
            var count = 0
            guard let groups = rd_kafka_ListConsumerGroupOffsets_result_groups(rd_kafka_event_ListConsumerGroupOffsets_result(event), &count) else { return [] }
            var offsets: [TopicPartitionOffset] = []
            for i in 0..<count {
                guard let g = groups[i] else { continue }
                if let error = rd_kafka_group_result_error(g) {
                    // Owned by the result: read it, do not destroy it.
                    throw KafkaError(code: .admin, message: "group \(group): \(String(cString: rd_kafka_error_string(error)))",
                                     rdKafkaCode: rd_kafka_error_code(error).rawValue)
                }
                guard let parts = rd_kafka_group_result_partitions(g) else { continue }
                for j in 0..<Int(parts.pointee.cnt) {
                    let e = parts.pointee.elems[j]
                    guard e.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
                    offsets.append(TopicPartitionOffset(String(cString: e.topic), e.partition, offset: e.offset))
                }
            }
            return offsets.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        }
    }
}
