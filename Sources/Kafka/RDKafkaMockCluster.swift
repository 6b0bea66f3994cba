import CKafka
import Logging

/// librdkafka's in-process mock cluster (`rdkafka_mock.h`), for tests and fault injection
/// (`pipelinectl chaos --broker mock`). A test double, not a broker to run the pipeline on: its
/// brokers listen on loopback TCP ports, so other clients and processes can use it, and it takes
/// brokers down, moves partition leaders and fails requests on demand.
public final class KafkaMockCluster: @unchecked Sendable {  // librdkafka's mock API is thread-safe
    private let client: RDKafkaClient
    private let cluster: OpaquePointer

    /// Starts `brokers` mock brokers listening on loopback.
    public init(brokers: Int = 1, logger: Logger = Logger(label: "kafka.mock")) throws(KafkaError) {
        // A handle to own the cluster; it never connects anywhere.
        client = try RDKafkaClient(kind: .producer, properties: ["bootstrap.servers": "", "log_level": "3"], logger: logger)
        guard let cluster = rd_kafka_mock_cluster_new(client.handle, Int32(brokers)) else {
            throw KafkaError(code: .other, message: "could not start the mock cluster")
        }
        self.cluster = cluster
    }

    /// A test double: destroyed synchronously (the mock cluster first, then its owning client).
    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        client.destroy()
    }

    /// The brokers' `host:port` list.
    public var bootstrapServers: String { String(cString: rd_kafka_mock_cluster_bootstraps(cluster)) }

    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        let err = rd_kafka_mock_topic_create(cluster, name, Int32(partitions), Int32(replicationFactor))
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw RDKafkaError.make(err, context: "mock topic \(name)") }
    }

    /// Makes `brokerID` (1-based) the leader of a partition: produce and fetch go there.
    public func setPartitionLeader(_ topic: String, partition: Int32, brokerID: Int32) {
        _ = rd_kafka_mock_partition_set_leader(cluster, topic, partition, brokerID)
    }

    /// Makes `brokerID` the coordinator of a consumer group (`"group"`) or a transactional id (`"transaction"`).
    public func setCoordinator(_ keyType: String, key: String, brokerID: Int32) {
        _ = rd_kafka_mock_coordinator_set(cluster, keyType, key, brokerID)
    }

    /// Takes a broker down: its connections close and new ones are refused.
    public func setBrokerDown(_ brokerID: Int32) {
        _ = rd_kafka_mock_broker_set_down(cluster, brokerID)
    }

    public func setBrokerUp(_ brokerID: Int32) {
        _ = rd_kafka_mock_broker_set_up(cluster, brokerID)
    }

    /// Adds round-trip latency to a broker.
    public func setBrokerRoundTrip(_ brokerID: Int32, milliseconds: Int) {
        _ = rd_kafka_mock_broker_set_rtt(cluster, brokerID, Int32(milliseconds))
    }

    /// Makes the next requests of this API key (e.g. 0 = Produce) fail with these broker error codes.
    public func pushRequestErrors(apiKey: Int16, errorCodes: [Int32]) {
        var errors = errorCodes.map { rd_kafka_resp_err_t(rawValue: $0) }
        rd_kafka_mock_push_request_errors_array(cluster, apiKey, errors.count, &errors)
    }

    /// Makes the next requests of this API key that broker `brokerID` receives fail with these
    /// broker error codes, one request each (the other brokers answer as usual), each answered
    /// after `roundTripMilliseconds` (requests behind it are answered meanwhile).
    public func pushRequestErrors(brokerID: Int32, apiKey: Int16, errorCodes: [Int32], roundTripMilliseconds: Int32 = 0) {
        for code in errorCodes {
            _ = ckafka_mock_broker_push_request_error(cluster, brokerID, apiKey, rd_kafka_resp_err_t(rawValue: code), roundTripMilliseconds)
        }
    }
}
