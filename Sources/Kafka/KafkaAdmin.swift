import Logging
import Synchronization

/// What a topic should look like.
public struct TopicSpec: Sendable, Hashable {
    public var name: String
    public var partitions: Int
    /// -1 lets the broker decide.
    public var replicationFactor: Int
    /// Topic configuration, e.g. `["cleanup.policy": "compact"]`.
    public var config: [String: String]

    public init(name: String, partitions: Int = 1, replicationFactor: Int = -1, config: [String: String] = [:]) {
        self.name = name
        self.partitions = partitions
        self.replicationFactor = replicationFactor
        self.config = config
    }

    public init(name: String, partitions: Int = 1, replicationFactor: Int = -1, cleanupPolicy: CleanupPolicy) {
        self.init(name: name, partitions: partitions, replicationFactor: replicationFactor, config: ["cleanup.policy": cleanupPolicy.rawValue])
    }
}

public enum CleanupPolicy: String, Sendable, Hashable {
    case delete, compact
    case compactAndDelete = "compact,delete"
}

/// A topic as the cluster reports it.
public struct TopicDescription: Sendable, Hashable {
    public var name: String
    public var partitions: Int
    /// `nil` when the broker does not answer DescribeConfigs.
    public var cleanupPolicy: String?
}

/// Low and high watermark of a partition: the first offset still stored and the next offset
/// that will be written.
public struct Watermarks: Sendable, Hashable {
    public var low: Int64
    public var high: Int64
    public init(low: Int64, high: Int64) {
        self.low = low
        self.high = high
    }
}

/// Topic and group administration. Every call waits for the broker off the cooperative pool.
public final class KafkaAdmin: Sendable {
    /// The librdkafka handle requests go to; replaced when a request to a group's coordinator
    /// is abandoned (``coordinated(_:)``).
    private let handle: Mutex<RDKafkaClient>
    private let properties: [String: String]
    private let logger: Logger
    public let timeout: Duration

    public init(configuration: KafkaConfiguration, timeout: Duration = .seconds(30), logger: Logger = Logger(label: "kafka.admin")) throws(KafkaError) {
        properties = try configuration.librdkafkaProperties()
        handle = Mutex(try RDKafkaClient(kind: .producer, properties: properties, logger: logger))
        self.logger = logger
        self.timeout = timeout
    }

    private var client: RDKafkaClient { handle.withLock { $0 } }

    /// Destroys the client off the cooperative pool. Call it before the program exits; an admin
    /// that was not closed is destroyed (blocking briefly) when it is released.
    public func close() async {
        let client = self.client
        await BlockingExecutor.run { client.destroy() }
    }

    /// Runs `body` on the current handle, held (``RDKafkaClient/using(_:)``) for the whole call: a
    /// body reaches the handle through `admin.client` only, never one read before (it may have
    /// been replaced and destroyed since).
    private func run<T: Sendable>(_ body: @escaping @Sendable (RDKafkaAdmin, Int32) throws(KafkaError) -> T) async throws(KafkaError) -> T {
        let client = self.client
        let admin = RDKafkaAdmin(client: client)
        let ms = timeout.timeoutMilliseconds
        return try await BlockingExecutor.run { () throws(KafkaError) in
            try client.using { () throws(KafkaError) in
                defer { client.drainLogs() }
                return try body(admin, ms)
            }
        }
    }

    /// A request to a group's coordinator (``RDKafkaAdmin/goesToCoordinator(_:)``). One not
    /// answered within ``timeout`` is left with its handle, which is replaced by a fresh one for
    /// the next requests and destroyed: librdkafka 2.16 aborts the process when such a request
    /// times out inside it and the coordinator comes back (librdkafka#4605); destroyed with the
    /// handle, it ends cleanly. (The console died so within seconds of a paused broker resuming.)
    private func coordinated<T: Sendable>(_ body: @escaping @Sendable (RDKafkaClient, Int32) throws(KafkaError) -> T) async throws(KafkaError) -> T {
        let client = self.client
        let ms = timeout.timeoutMilliseconds
        do {
            return try await BlockingExecutor.run { () throws(KafkaError) in
                try client.using { () throws(KafkaError) in
                    defer { client.drainLogs() }
                    return try body(client, ms)
                }
            }
        } catch where error.code == .timedOut {
            retire(client)
            throw error
        }
    }

    /// Replaces `client` (unless another request did already) and destroys it off the pool once
    /// the requests using it have returned.
    private func retire(_ client: RDKafkaClient) {
        let replaced = handle.withLock { current -> Bool in
            guard current === client, let fresh = try? RDKafkaClient(kind: .producer, properties: properties, logger: logger) else { return false }
            current = fresh
            return true
        }
        guard replaced else { return }
        logger.info("a group request was not answered in time: its client is replaced and destroyed")
        Task { await BlockingExecutor.run { client.destroy() } }
    }

    /// Creates a topic. With `ignoreExisting`, an existing topic of that name is not an error.
    public func createTopic(_ spec: TopicSpec, ignoreExisting: Bool = false) async throws(KafkaError) {
        try await run { (admin, ms) throws(KafkaError) in try admin.createTopic(spec, ignoreExisting: ignoreExisting, timeoutMilliseconds: ms) }
    }

    /// Creates `spec` unless a topic of that name exists, with a client of its own (closed after).
    public static func ensureTopic(_ spec: TopicSpec, configuration: KafkaConfiguration) async throws(KafkaError) {
        let admin = try KafkaAdmin(configuration: configuration, timeout: .seconds(10))
        do {
            // A topic that exists needs no CreateTopics (which a client without the right to
            // create may not send, and librdkafka's mock cluster never answers: a 10 s wait).
            if try await admin.topicExists(spec.name) {
                await admin.close()
                return
            }
            try await admin.createTopic(spec, ignoreExisting: true)
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
    }

    public func deleteTopic(_ name: String) async throws(KafkaError) {
        try await run { (admin, ms) throws(KafkaError) in try admin.deleteTopic(name, timeoutMilliseconds: ms) }
    }

    /// All topics with their partition counts and cleanup policy (`withConfig`: one
    /// DescribeConfigs per topic; without it, from the metadata alone and no policy), sorted by name.
    public func listTopics(includeInternal: Bool = false, withConfig: Bool = true) async throws(KafkaError) -> [TopicDescription] {
        return try await run { (admin, ms) throws(KafkaError) in
            try admin.client.metadata(topic: nil, timeoutMilliseconds: ms)
                .filter { includeInternal || !$0.name.hasPrefix("__") }
                .map { topic in
                    let config = withConfig ? try? admin.describeTopicConfig(topic.name, timeoutMilliseconds: ms) : nil
                    return TopicDescription(name: topic.name, partitions: topic.partitions, cleanupPolicy: config?["cleanup.policy"])
                }
                .sorted { $0.name < $1.name }
        }
    }

    /// Whether the cluster has this topic (from the metadata of every topic: asking for the one
    /// topic could make a broker that creates topics on demand create it).
    public func topicExists(_ name: String) async throws(KafkaError) -> Bool {
        return try await run { (admin, ms) throws(KafkaError) in try admin.client.metadata(topic: nil, timeoutMilliseconds: ms).contains { $0.name == name } }
    }

    /// One topic's description; throws when it does not exist.
    public func describeTopic(_ name: String) async throws(KafkaError) -> TopicDescription {
        return try await run { (admin, ms) throws(KafkaError) in
            guard let topic = try admin.client.metadata(topic: name, timeoutMilliseconds: ms).first else {
                throw KafkaError(code: .admin, message: "topic \(name) not found")
            }
            if let error = topic.error { throw error }
            let config = try? admin.describeTopicConfig(name, timeoutMilliseconds: ms)
            return TopicDescription(name: name, partitions: topic.partitions, cleanupPolicy: config?["cleanup.policy"])
        }
    }

    /// The group's committed offsets (each the next offset the group will read).
    public func committedOffsets(group: String, partitions: [TopicPartition]? = nil) async throws(KafkaError) -> [TopicPartitionOffset] {
        try await coordinated { (client, ms) throws(KafkaError) in
            try RDKafkaAdmin(client: client).committedOffsets(group: group, partitions: partitions, timeoutMilliseconds: ms)
        }
    }

    /// Low and high watermarks, asked from the partition leader (ListOffsets).
    ///
    /// tansu 0.6 answers ListOffsets(latest) with the last batch's base offset plus one, which is
    /// too low when that batch holds several records; Apache Kafka and the mock cluster are exact.
    public func watermarks(_ partition: TopicPartition) async throws(KafkaError) -> Watermarks {
        return try await run { (admin, ms) throws(KafkaError) in
            let w = try admin.client.queryWatermarks(partition, timeoutMilliseconds: ms)
            return Watermarks(low: w.low, high: w.high)
        }
    }
}

/// A consumer group as ListGroups reports it.
public struct ConsumerGroupListing: Sendable, Hashable, Codable {
    public var group: String
    /// librdkafka's state name: Stable, Empty, PreparingRebalance, CompletingRebalance, Dead, Unknown.
    public var state: String
    /// A group that only commits offsets (no members, no subscription).
    public var isSimple: Bool
}

/// A group member and its assignment.
public struct ConsumerGroupMember: Sendable, Hashable, Codable {
    public var memberID: String
    public var clientID: String
    public var host: String
    public var assignment: [TopicPartition]

    public init(memberID: String, clientID: String, host: String, assignment: [TopicPartition]) {
        self.memberID = memberID
        self.clientID = clientID
        self.host = host
        self.assignment = assignment
    }
}

public struct ConsumerGroupDescription: Sendable, Hashable, Codable {
    public var group: String
    public var state: String
    public var assignor: String
    public var members: [ConsumerGroupMember]
}

extension KafkaAdmin {
    private func runGroups<T: Sendable>(_ body: @escaping @Sendable (RDKafkaGroupAdmin, Int32) throws(KafkaError) -> T) async throws(KafkaError) -> T {
        let client = self.client
        let ms = timeout.timeoutMilliseconds
        return try await BlockingExecutor.run { () throws(KafkaError) in
            try client.using { () throws(KafkaError) in
                defer { client.drainLogs() }
                return try body(RDKafkaGroupAdmin(client: client), ms)
            }
        }
    }

    /// A topic's partitions, from metadata only (no DescribeConfigs, which some brokers, like
    /// librdkafka's mock cluster, leave unanswered until the timeout). Throws when the topic
    /// does not exist.
    public func partitions(of topic: String) async throws(KafkaError) -> [TopicPartition] {
        let client = self.client
        let ms = timeout.timeoutMilliseconds
        return try await BlockingExecutor.run { () throws(KafkaError) in
            try client.using { () throws(KafkaError) in
                guard let t = try client.metadata(topic: topic, timeoutMilliseconds: ms).first else {
                    throw KafkaError(code: .admin, message: "topic \(topic) not found")
                }
                if let error = t.error { throw error }
                return (0..<t.partitions).map { TopicPartition(topic, Int32($0)) }
            }
        }
    }

    /// Every consumer group the cluster knows, sorted by name.
    public func listGroups() async throws(KafkaError) -> [ConsumerGroupListing] {
        try await runGroups { (admin, ms) throws(KafkaError) in try admin.listGroups(timeoutMilliseconds: ms) }
    }

    /// A group's state and members with their assignments.
    public func describeGroup(_ group: String) async throws(KafkaError) -> ConsumerGroupDescription {
        try await coordinated { (client, ms) throws(KafkaError) in try RDKafkaGroupAdmin(client: client).describeGroup(group, timeoutMilliseconds: ms) }
    }

    /// Sets a group's committed offsets. The broker refuses while the group has members.
    public func alterCommittedOffsets(group: String, offsets: [TopicPartitionOffset]) async throws(KafkaError) {
        try await coordinated { (client, ms) throws(KafkaError) in
            try RDKafkaGroupAdmin(client: client).alterOffsets(group: group, offsets: offsets, timeoutMilliseconds: ms)
        }
    }

    /// Per partition, the first offset whose timestamp is at or after `timestamp` (epoch ms);
    /// -1 when every record is older.
    public func offsetsForTimes(_ partitions: [TopicPartition], timestamp: Int64) async throws(KafkaError) -> [TopicPartitionOffset] {
        let times = partitions.map { TopicPartitionOffset($0.topic, $0.partition, offset: timestamp) }
        return try await runGroups { (admin, ms) throws(KafkaError) in try admin.offsetsForTimes(times, timeoutMilliseconds: ms) }
    }
}
