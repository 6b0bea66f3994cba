import CKafka
import Glibc
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
    ///
    /// librdkafka closes the broker's listening socket and binds a new one to the same port at
    /// once, and aborts the process if it cannot. A port with no other socket on it is free in
    /// between for any process's next connection or `bind` to port 0; a chaos run on a loaded
    /// machine died so, before its workers had connected to that broker. So a connection of our
    /// own, accepted (it has had an answer), holds the port across the rebind.
    public func setBrokerDown(_ brokerID: Int32) {
        let holder = Self.heldConnection(toPort: port(of: brokerID))
        _ = rd_kafka_mock_broker_set_down(cluster, brokerID)
        if let holder { close(holder) }
    }

    /// Broker `brokerID`'s port (the bootstrap list is in broker order).
    private func port(of brokerID: Int32) -> UInt16? {
        let servers = bootstrapServers.split(separator: ",")
        guard brokerID >= 1, Int(brokerID) <= servers.count, let colon = servers[Int(brokerID) - 1].lastIndex(of: ":") else { return nil }
        return UInt16(servers[Int(brokerID) - 1][colon...].dropFirst())
    }

    /// A loopback connection to `port` that the broker has accepted: an ApiVersions v0 request
    /// sent and the start of its answer read (5 s at most). Nil if the broker does not answer.
    private static func heldConnection(toPort port: UInt16?) -> Int32? {
        guard let port else { return nil }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        // Size 10; ApiVersions (18) v0, correlation id 1, no client id.
        let request: [UInt8] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xFF, 0xFF]
        var answer = [UInt8](repeating: 0, count: 4)
        guard connected == 0, send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count,
            recv(fd, &answer, answer.count, Int32(MSG_WAITALL)) == answer.count
        else {
            close(fd)
            return nil
        }
        return fd
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

    /// Drops the errors ``pushRequestErrors(apiKey:errorCodes:)`` queued for this API key and not yet used.
    public func clearRequestErrors(apiKey: Int16) {
        rd_kafka_mock_clear_request_errors(cluster, apiKey)
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
