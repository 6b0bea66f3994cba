import CKafka

/// Consumer-group admin requests (KIP-518 list/describe, KIP-396 alter offsets) and
/// offsets-for-times over an `RDKafkaClient`. Blocking: call only from a ``BlockingExecutor``.
struct RDKafkaGroupAdmin {
    let client: RDKafkaClient

    /// The one admin request runner (options, private queue, timeout, event error).
    private var admin: RDKafkaAdmin { RDKafkaAdmin(client: client) }

    /// The error a result object carries (owned by the result: read, never destroyed).
    private func check(_ error: OpaquePointer?, _ what: String) throws(KafkaError) {
        guard let error else { return }
        let code = rd_kafka_error_code(error)
        guard code != RD_KAFKA_RESP_ERR_NO_ERROR else { return }
        throw KafkaError(code: .admin, message: "\(what): \(String(cString: rd_kafka_error_string(error)))", rdKafkaCode: code.rawValue)
    }

    func listGroups(timeoutMilliseconds: Int32) throws(KafkaError) -> [ConsumerGroupListing] {
        try admin.request(RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS, timeoutMilliseconds: timeoutMilliseconds, what: "list groups") { options, queue in
            rd_kafka_ListConsumerGroups(client.handle, options, queue)
        } read: { (event) throws(KafkaError) in
            let result = rd_kafka_event_ListConsumerGroups_result(event)
            var count = 0
            var groups: [ConsumerGroupListing] = []
            if let valid = rd_kafka_ListConsumerGroups_result_valid(result, &count) {
                for i in 0..<count {
                    guard let g = valid[i] else { continue }
                    groups.append(ConsumerGroupListing(
                        group: String(cString: rd_kafka_ConsumerGroupListing_group_id(g)),
                        state: String(cString: rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupListing_state(g))),
                        isSimple: rd_kafka_ConsumerGroupListing_is_simple_consumer_group(g) != 0))
                }
            }
            var errorCount = 0
            if groups.isEmpty, let errors = rd_kafka_ListConsumerGroups_result_errors(result, &errorCount), errorCount > 0 {
                try check(errors[0], "list groups")
            }
            return groups.sorted { $0.group < $1.group }
        }
    }

    func describeGroup(_ group: String, timeoutMilliseconds: Int32) throws(KafkaError) -> ConsumerGroupDescription {
        try admin.request(RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS, timeoutMilliseconds: timeoutMilliseconds, what: "describe group \(group)") { options, queue in
            group.withCString { name in
                var names: [UnsafePointer<CChar>?] = [name]
                rd_kafka_DescribeConsumerGroups(client.handle, &names, 1, options, queue)
            }
        } read: { (event) throws(KafkaError) in
            var count = 0
            guard let groups = rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(event), &count),
                count > 0, let g = groups[0]
            else { throw KafkaError(code: .admin, message: "describe group \(group): no answer") }
            try check(rd_kafka_ConsumerGroupDescription_error(g), "describe group \(group)")
            var members: [ConsumerGroupMember] = []
            for i in 0..<rd_kafka_ConsumerGroupDescription_member_count(g) {
                guard let m = rd_kafka_ConsumerGroupDescription_member(g, i) else { continue }
                var assigned: [TopicPartition] = []
                if let a = rd_kafka_MemberDescription_assignment(m), let list = rd_kafka_MemberAssignment_partitions(a) {
                    assigned = RDKafkaTopicPartitionList.partitions(of: list)
                }
                members.append(ConsumerGroupMember(
                    memberID: String(cString: rd_kafka_MemberDescription_consumer_id(m)),
                    clientID: String(cString: rd_kafka_MemberDescription_client_id(m)),
                    host: String(cString: rd_kafka_MemberDescription_host(m)),
                    assignment: assigned.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }))
            }
            return ConsumerGroupDescription(
                group: group,
                state: String(cString: rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(g))),
                assignor: rd_kafka_ConsumerGroupDescription_partition_assignor(g).map { String(cString: $0) } ?? "",
                members: members.sorted { $0.memberID < $1.memberID })
        }
    }

    func alterOffsets(group: String, offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(offsets)
        // _new copies the list; ours is destroyed by its owner.
        let alter = rd_kafka_AlterConsumerGroupOffsets_new(group, list.pointer)!
        defer { rd_kafka_AlterConsumerGroupOffsets_destroy(alter) }
        try admin.request(RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS, timeoutMilliseconds: timeoutMilliseconds, what: "alter offsets of group \(group)") { options, queue in
            var alters: [OpaquePointer?] = [alter]
            rd_kafka_AlterConsumerGroupOffsets(client.handle, &alters, 1, options, queue)
        } read: { (event) throws(KafkaError) in
            var count = 0
            guard let groups = rd_kafka_AlterConsumerGroupOffsets_result_groups(rd_kafka_event_AlterConsumerGroupOffsets_result(event), &count) else { return }
            for i in 0..<count {
                guard let g = groups[i] else { continue }
                try check(rd_kafka_group_result_error(g), "alter offsets of group \(group)")
                guard let parts = rd_kafka_group_result_partitions(g) else { continue }
                for j in 0..<Int(parts.pointee.cnt) {
                    let e = parts.pointee.elems[j]
                    guard e.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
                        throw RDKafkaError.make(e.err, code: .admin, context: "alter offset of group \(group) on \(String(cString: e.topic))[\(e.partition)]")
                    }
                }
            }
        }
    }

    /// `rd_kafka_offsets_for_times`: per partition, the first offset whose timestamp is at or
    /// after the given one (epoch ms), or -1 (the end) when there is none.
    func offsetsForTimes(_ times: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList(times)
        let err = rd_kafka_offsets_for_times(client.handle, list.pointer, timeoutMilliseconds)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, code: .broker, context: "offsets for times") }
        if let error = list.firstError(context: "offsets for times") { throw error }
        return list.offsets
    }
}
