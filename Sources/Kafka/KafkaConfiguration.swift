/// Settings shared by producers, consumers and admin clients.
///
/// Typed properties cover what this project sets; `nil` means librdkafka's default.
/// Anything else goes through ``raw`` (librdkafka key names, e.g. `"socket.keepalive.enable"`).
/// Every key, typed or raw, is checked by librdkafka when a client is created and an unknown
/// or invalid key fails with a ``KafkaError`` naming it.
public struct KafkaConfiguration: Sendable {
    /// `host:port` pairs of the bootstrap brokers.
    public var bootstrapServers: [String]
    public var clientID: String?
    public var security: Security = .plaintext
    /// Timeout for network requests (`socket.timeout.ms`).
    public var socketTimeout: Duration?
    /// How long metadata stays fresh (`topic.metadata.refresh.interval.ms`).
    public var metadataRefreshInterval: Duration?
    /// librdkafka debug contexts, e.g. `["broker", "protocol"]` (`debug`).
    public var debugContexts: [String] = []
    /// Escape hatch: raw librdkafka keys, applied after the typed ones.
    public var raw: [String: String] = [:]

    public init(bootstrapServers: [String]) {
        self.bootstrapServers = bootstrapServers
    }

    public enum Security: Sendable {
        case plaintext
        case ssl(TLS)
        case saslPlaintext(SASL)
        case saslSSL(SASL, TLS)
    }

    public struct TLS: Sendable {
        public var caLocation: String?
        public var certificateLocation: String?
        public var keyLocation: String?
        public var keyPassword: Secret?
        public var verifyHostname: Bool = true
        public init(caLocation: String? = nil, certificateLocation: String? = nil, keyLocation: String? = nil, keyPassword: Secret? = nil) {
            self.caLocation = caLocation
            self.certificateLocation = certificateLocation
            self.keyLocation = keyLocation
            self.keyPassword = keyPassword
        }
    }

    public struct SASL: Sendable {
        public enum Mechanism: String, Sendable {
            case plain = "PLAIN"
            case scramSHA256 = "SCRAM-SHA-256"
            case scramSHA512 = "SCRAM-SHA-512"
        }
        public var mechanism: Mechanism
        public var username: String
        public var password: Secret
        public init(mechanism: Mechanism, username: String, password: Secret) {
            self.mechanism = mechanism
            self.username = username
            self.password = password
        }
    }

    /// The librdkafka key/value pairs for these settings. This (with the producer's and
    /// consumer's additions) is the only place typed settings become strings.
    func librdkafkaProperties() -> [String: String] {
        var p: [String: String] = [:]
        p["bootstrap.servers"] = bootstrapServers.joined(separator: ",")
        p["client.id"] = clientID
        p["socket.timeout.ms"] = socketTimeout.map(milliseconds)
        p["topic.metadata.refresh.interval.ms"] = metadataRefreshInterval.map(milliseconds)
        if !debugContexts.isEmpty { p["debug"] = debugContexts.joined(separator: ",") }
        func tls(_ t: TLS) {
            p["ssl.ca.location"] = t.caLocation
            p["ssl.certificate.location"] = t.certificateLocation
            p["ssl.key.location"] = t.keyLocation
            p["ssl.key.password"] = t.keyPassword?.value
            p["ssl.endpoint.identification.algorithm"] = t.verifyHostname ? "https" : "none"
        }
        func sasl(_ s: SASL) {
            p["sasl.mechanisms"] = s.mechanism.rawValue
            p["sasl.username"] = s.username
            p["sasl.password"] = s.password.value
        }
        switch security {
        case .plaintext:
            p["security.protocol"] = "plaintext"
        case .ssl(let t):
            p["security.protocol"] = "ssl"
            tls(t)
        case .saslPlaintext(let s):
            p["security.protocol"] = "sasl_plaintext"
            sasl(s)
        case .saslSSL(let s, let t):
            p["security.protocol"] = "sasl_ssl"
            sasl(s)
            tls(t)
        }
        for (key, value) in raw { p[key] = value }
        return p
    }
}

/// A secret configuration value (a password). Its description is redacted, so it never
/// reaches a log line or an error message by accident.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, ExpressibleByStringLiteral {
    public let value: String
    public init(_ value: String) { self.value = value }
    public init(stringLiteral value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }

    /// librdkafka keys whose values must never be printed.
    static func isSecretKey(_ key: String) -> Bool {
        let k = key.lowercased()
        return k.contains("password") || k.contains("secret") || k.contains("jaas")
            || k.hasSuffix(".key.pem") || k.contains("oauthbearer.config") || k.contains("sasl.oauthbearer.client")
            || k == "ssl.keystore.password" || k == "ssl_key" || k.hasSuffix("ssl.key.pem")
    }
}

/// Producer settings. Idempotence and `acks=all` are on by default: a retried send never
/// duplicates or reorders messages within a partition.
public struct ProducerConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var idempotence: Bool = true
    public var acks: Acks = .all
    /// How long to wait to fill a batch (`linger.ms`).
    public var linger: Duration?
    /// Maximum batch size in bytes (`batch.size`).
    public var batchSize: Int?
    /// Upper bound on messages held locally (`queue.buffering.max.messages`); `send` waits when full.
    public var maxQueuedMessages: Int?
    /// How long a message may take to be delivered, retries included (`message.timeout.ms`).
    public var messageTimeout: Duration?
    public var compression: Compression?
    /// Partitioner for keyed messages (`partitioner`); librdkafka's default is `consistent_random`.
    public var partitioner: Partitioner?
    /// How often librdkafka reports ``KafkaProducer/statistics`` (`statistics.interval.ms`; nil: never).
    public var statisticsInterval: Duration?
    /// Makes the producer transactional (`transactional.id`): call
    /// ``KafkaProducer/initTransactions(timeout:)`` once, then send only inside transactions.
    /// A new producer with the same id fences the old one and aborts its open transaction.
    public var transactionalID: String?
    /// How long the coordinator lets a transaction stay open before aborting it
    /// (`transaction.timeout.ms`); also bounds `message.timeout.ms`.
    public var transactionTimeout: Duration?

    public init(kafka: KafkaConfiguration) { self.kafka = kafka }
    public init(bootstrapServers: [String]) { self.kafka = KafkaConfiguration(bootstrapServers: bootstrapServers) }

    public enum Acks: String, Sendable { case none = "0", leader = "1", all = "all" }
    public enum Compression: String, Sendable { case none, gzip, snappy, lz4, zstd }
    public enum Partitioner: String, Sendable {
        case consistentRandom = "consistent_random"
        case murmur2Random = "murmur2_random"
        case fnv1aRandom = "fnv1a_random"
    }

    func librdkafkaProperties() -> [String: String] {
        var p = kafka.librdkafkaProperties()
        p["enable.idempotence"] = idempotence ? "true" : "false"
        p["acks"] = acks.rawValue
        p["linger.ms"] = linger.map(milliseconds)
        p["batch.size"] = batchSize.map(String.init)
        p["queue.buffering.max.messages"] = maxQueuedMessages.map(String.init)
        p["message.timeout.ms"] = messageTimeout.map(milliseconds)
        p["compression.codec"] = compression?.rawValue
        p["partitioner"] = partitioner?.rawValue
        p["statistics.interval.ms"] = statisticsInterval.map(milliseconds)
        p["transactional.id"] = transactionalID
        p["transaction.timeout.ms"] = transactionTimeout.map(milliseconds)
        for (key, value) in kafka.raw { p[key] = value }
        return p
    }
}

/// Consumer-group settings. Offsets are stored and committed by the application only
/// (`enable.auto.offset.store=false`); ``autoCommit`` decides whether stored offsets are
/// committed in the background or only by ``KafkaConsumer/commit()``.
public struct ConsumerConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var groupID: String
    /// Where to start when the group has no committed offset for a partition.
    public var autoOffsetReset: OffsetReset = .earliest
    /// Heartbeat deadline (`session.timeout.ms`). Keep it low against the local broker:
    /// tansu answers JoinGroup after about half of it.
    public var sessionTimeout: Duration?
    public var heartbeatInterval: Duration?
    /// Longest time between two pulls of the message sequence before the consumer leaves the group.
    public var maxPollInterval: Duration?
    public var assignmentStrategy: AssignmentStrategy = .cooperativeSticky
    /// Commit stored offsets in the background every `autoCommitInterval` (on by default,
    /// only offsets the application stored are committed).
    public var autoCommit: Bool = true
    public var autoCommitInterval: Duration?
    public var isolationLevel: IsolationLevel?
    /// Emit an ``ConsumerEvent/endOfPartition(_:)`` when a partition is read to its end.
    public var reportEndOfPartition: Bool = false
    /// Most records handed out in one ``ConsumerEvent/records(_:)`` batch.
    public var maxBatchSize: Int = 1000
    /// Static membership id (`group.instance.id`).
    public var groupInstanceID: String?
    /// How often librdkafka reports ``KafkaConsumer/statistics`` (`statistics.interval.ms`; nil: never).
    public var statisticsInterval: Duration?
    /// Longest time the broker holds a fetch waiting for data (`fetch.wait.max.ms`).
    public var fetchMaxWait: Duration?
    /// How long a partition's next fetch waits once the local queue is over `queued.min.messages`
    /// (`fetch.queue.backoff.ms`). librdkafka's default, 1 s, lets a consumer that drains its
    /// queue faster than that sit idle for the rest of the second; 10 ms keeps it fed. The key
    /// exists from librdkafka 2.2.0; older runtimes keep their fixed 1 s.
    public var fetchQueueBackoff: Duration? = .milliseconds(10)

    public init(kafka: KafkaConfiguration, groupID: String) {
        self.kafka = kafka
        self.groupID = groupID
    }

    public init(bootstrapServers: [String], groupID: String) {
        self.init(kafka: KafkaConfiguration(bootstrapServers: bootstrapServers), groupID: groupID)
    }

    public enum OffsetReset: String, Sendable { case earliest, latest, error }
    public enum AssignmentStrategy: String, Sendable {
        case range, roundRobin = "roundrobin", cooperativeSticky = "cooperative-sticky"
    }
    public enum IsolationLevel: String, Sendable { case readCommitted = "read_committed", readUncommitted = "read_uncommitted" }

    func librdkafkaProperties() -> [String: String] {
        var p = kafka.librdkafkaProperties()
        p["group.id"] = groupID
        p["auto.offset.reset"] = autoOffsetReset.rawValue
        p["session.timeout.ms"] = sessionTimeout.map(milliseconds)
        p["heartbeat.interval.ms"] = heartbeatInterval.map(milliseconds)
        p["max.poll.interval.ms"] = maxPollInterval.map(milliseconds)
        p["partition.assignment.strategy"] = assignmentStrategy.rawValue
        p["enable.auto.commit"] = autoCommit ? "true" : "false"
        p["auto.commit.interval.ms"] = autoCommitInterval.map(milliseconds)
        p["enable.auto.offset.store"] = "false"
        p["isolation.level"] = isolationLevel?.rawValue
        p["enable.partition.eof"] = reportEndOfPartition ? "true" : "false"
        p["group.instance.id"] = groupInstanceID
        p["statistics.interval.ms"] = statisticsInterval.map(milliseconds)
        p["fetch.wait.max.ms"] = fetchMaxWait.map(milliseconds)
        if KafkaRuntime.version >= 0x0202_0000 { p["fetch.queue.backoff.ms"] = fetchQueueBackoff.map(milliseconds) }
        for (key, value) in kafka.raw { p[key] = value }
        return p
    }
}

func milliseconds(_ d: Duration) -> String { String(d.wholeMilliseconds) }

extension Duration {
    /// Whole milliseconds (sub-millisecond parts dropped), as librdkafka's `*.ms` settings and timeouts take them.
    package var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// The same, clamped to a C `int` timeout argument.
    var timeoutMilliseconds: Int32 { Int32(clamping: wholeMilliseconds) }

    /// Seconds, with the fraction (metrics, logs).
    package var asSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
