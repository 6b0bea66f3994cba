import CKafka

/// Owns an `rd_kafka_topic_partition_list_t` and destroys it in `deinit`.
final class RDKafkaTopicPartitionList {
    let pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

    init(capacity: Int = 1) {
        pointer = rd_kafka_topic_partition_list_new(Int32(capacity))
    }

    /// Takes ownership of a list librdkafka handed over.
    init(owning pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) {
        self.pointer = pointer
    }

    convenience init(_ partitions: [TopicPartition]) {
        self.init(capacity: partitions.count)
        for tp in partitions { add(tp.topic, tp.partition, offset: nil) }
    }

    convenience init(_ offsets: [TopicPartitionOffset]) {
        self.init(capacity: offsets.count)
        for tpo in offsets { add(tpo.topic, tpo.partition, offset: tpo.offset) }
    }

    deinit { rd_kafka_topic_partition_list_destroy(pointer) }

    func add(_ topic: String, _ partition: Int32, offset: Int64?) {
        let element = rd_kafka_topic_partition_list_add(pointer, topic, partition)!
        if let offset { element.pointee.offset = offset }
    }

    var count: Int { Int(pointer.pointee.cnt) }

    /// The entries of a list librdkafka does not own for us (e.g. a rebalance callback's).
    static func partitions(of list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [TopicPartition] {
        (0..<Int(list.pointee.cnt)).map { i in
            let e = list.pointee.elems[i]
            return TopicPartition(String(cString: e.topic), e.partition)
        }
    }

    var partitions: [TopicPartition] { Self.partitions(of: pointer) }

    var offsets: [TopicPartitionOffset] {
        (0..<count).map { i in
            let e = pointer.pointee.elems[i]
            return TopicPartitionOffset(String(cString: e.topic), e.partition, offset: e.offset)
        }
    }

    /// The first per-partition error in the list, if any (`ignoring` one that is not an error here).
    func firstError(context: String, ignoring: rd_kafka_resp_err_t = RD_KAFKA_RESP_ERR_NO_ERROR) -> KafkaError? {
        for i in 0..<count {
            let e = pointer.pointee.elems[i]
            if e.err != RD_KAFKA_RESP_ERR_NO_ERROR && e.err != ignoring {
                return RDKafkaError.make(e.err, code: .broker, context: "\(context) \(String(cString: e.topic))[\(e.partition)]")
            }
        }
        return nil
    }
}
