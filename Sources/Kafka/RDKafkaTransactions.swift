import CKafka

/// The consumer's group membership as the transaction coordinator checks it
/// (`rd_kafka_consumer_group_metadata`): sent with the input offsets of a transaction, so that a
/// broker refuses the offsets of a member that no longer owns its partitions (KIP-447).
public final class ConsumerGroupMetadata: @unchecked Sendable {  // immutable once made
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { rd_kafka_consumer_group_metadata_destroy(pointer) }
}

extension RDKafkaConsumer {
    func groupMetadata() throws(KafkaError) -> ConsumerGroupMetadata {
        guard let pointer = rd_kafka_consumer_group_metadata(client.handle) else {
            throw KafkaError(code: .broker, message: "the consumer has no group metadata (is it a group member?)")
        }
        return ConsumerGroupMetadata(pointer)
    }

    /// `rd_kafka_seek_partitions` without waiting (timeout 0): the next fetch of each partition
    /// starts at its offset; what librdkafka fetched before is discarded. Non-blocking.
    func seek(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(offsets)
        if let error = rd_kafka_seek_partitions(client.handle, list.pointer, 0) {
            throw RDKafkaError.take(error, code: .broker, context: "seek")
        }
        // Without waiting, each partition reports _IN_PROGRESS: the seek is under way.
        if let error = list.firstError(context: "seek", ignoring: RD_KAFKA_RESP_ERR__IN_PROGRESS) { throw error }
    }
}

/// librdkafka's transactional producer API. Every call but `begin` waits for the transaction
/// coordinator: call them through ``BlockingExecutor``.
extension RDKafkaClient {
    func initTransactions(timeoutMilliseconds: Int32) throws(KafkaError) {
        if let error = rd_kafka_init_transactions(handle, timeoutMilliseconds) {
            throw RDKafkaError.take(error, code: .broker, context: "init transactions")
        }
    }

    /// Local only; does not block.
    func beginTransaction() throws(KafkaError) {
        if let error = rd_kafka_begin_transaction(handle) {
            throw RDKafkaError.take(error, code: .broker, context: "begin transaction")
        }
    }

    func sendOffsetsToTransaction(
        _ offsets: [TopicPartitionOffset], group: ConsumerGroupMetadata, timeoutMilliseconds: Int32
    ) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList(offsets)
        if let error = rd_kafka_send_offsets_to_transaction(handle, list.pointer, group.pointer, timeoutMilliseconds) {
            throw RDKafkaError.take(error, code: .broker, context: "send offsets to transaction")
        }
    }

    func commitTransaction(timeoutMilliseconds: Int32) throws(KafkaError) {
        if let error = rd_kafka_commit_transaction(handle, timeoutMilliseconds) {
            throw RDKafkaError.take(error, code: .broker, context: "commit transaction")
        }
    }

    func abortTransaction(timeoutMilliseconds: Int32) throws(KafkaError) {
        if let error = rd_kafka_abort_transaction(handle, timeoutMilliseconds) {
            throw RDKafkaError.take(error, code: .broker, context: "abort transaction")
        }
    }
}
