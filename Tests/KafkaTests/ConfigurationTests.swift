import Testing
@testable import Kafka

@Suite struct ConfigurationTests {
    @Test func typedSettingsBecomeLibrdkafkaKeys() {
        var config = ConsumerConfiguration(bootstrapServers: ["a:9092", "b:9092"], groupID: "g")
        config.sessionTimeout = .milliseconds(2500)
        config.kafka.clientID = "worker-1"
        config.assignmentStrategy = .range
        let p = config.librdkafkaProperties()
        #expect(p["bootstrap.servers"] == "a:9092,b:9092")
        #expect(p["group.id"] == "g")
        #expect(p["session.timeout.ms"] == "2500")
        #expect(p["client.id"] == "worker-1")
        #expect(p["partition.assignment.strategy"] == "range")
        #expect(p["enable.auto.offset.store"] == "false")
        #expect(p["heartbeat.interval.ms"] == nil, "unset typed keys keep librdkafka's default")
        // librdkafka's 1 s would idle a consumer that empties its queue faster (2.16 is loaded here).
        #expect(p["fetch.queue.backoff.ms"] == "10")
    }

    @Test func producerDefaultsAreIdempotentWithAcksAll() {
        let p = ProducerConfiguration(bootstrapServers: ["x:1"]).librdkafkaProperties()
        #expect(p["enable.idempotence"] == "true")
        #expect(p["acks"] == "all")
    }

    @Test func rawKeysOverrideTypedOnes() {
        var config = ProducerConfiguration(bootstrapServers: ["x:1"])
        config.linger = .milliseconds(5)
        config.kafka.raw["linger.ms"] = "50"
        #expect(config.librdkafkaProperties()["linger.ms"] == "50")
    }

    @Test func unknownKeyIsReportedByName() throws {
        var config = ProducerConfiguration(bootstrapServers: ["127.0.0.1:1"])
        config.kafka.raw["lingerr.ms"] = "5"
        let error = #expect(throws: KafkaError.self) { try KafkaProducer(configuration: config) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.key == "lingerr.ms")
        #expect(error?.message.contains("lingerr.ms") == true)
    }

    @Test func invalidValueIsReportedByName() throws {
        var config = ConsumerConfiguration(bootstrapServers: ["127.0.0.1:1"], groupID: "g")
        config.kafka.raw["fetch.wait.max.ms"] = "soon"
        let error = #expect(throws: KafkaError.self) { try KafkaConsumer(configuration: config) }
        #expect(error?.key == "fetch.wait.max.ms")
    }

    @Test func secretsNeverAppearInErrors() throws {
        var config = ProducerConfiguration(bootstrapServers: ["127.0.0.1:1"])
        let password = "hunter2-very-secret"
        config.kafka.security = .saslPlaintext(.init(mechanism: .scramSHA256, username: "u", password: Secret(password)))
        // An invalid value for a secret-bearing key: librdkafka would quote it.
        config.kafka.raw["ssl.key.password"] = password
        config.kafka.raw["sasl.kerberos.min.time.before.relogin"] = "not-a-number"
        let error = #expect(throws: KafkaError.self) { try KafkaProducer(configuration: config) }
        #expect(error.map { "\($0)" }?.contains(password) == false)
        #expect("\(Secret(password))" == "<redacted>")
        #expect("\(config.kafka.security)".contains(password) == false)
    }

    @Test func rejectedSecretValueIsRedacted() {
        let reason = "Invalid value \"p@ss\" for configuration property \"ssl.key.password\""
        #expect(RDKafkaConfig.redact(reason, key: "ssl.key.password", value: "p@ss") == "Invalid value \"<redacted>\" for configuration property \"ssl.key.password\"")
        #expect(RDKafkaConfig.redact(reason, key: "linger.ms", value: "p@ss") == reason, "non-secret values stay readable")
    }

    @Test func zeroBatchSizeIsRejected() {
        var config = ConsumerConfiguration(bootstrapServers: ["127.0.0.1:1"], groupID: "g")
        config.maxBatchSize = 0
        let error = #expect(throws: KafkaError.self) { try KafkaConsumer(configuration: config) }
        #expect(error?.key == "maxBatchSize")
    }

    @Test func durationsBecomeMilliseconds() {
        #expect(milliseconds(.seconds(6)) == "6000")
        #expect(milliseconds(.milliseconds(250)) == "250")
        #expect(milliseconds(.microseconds(1500)) == "1")
        #expect(Duration.milliseconds(500).timeoutMilliseconds == 500, "sub-second timeouts are kept")
        #expect(Duration.seconds(10_000_000).timeoutMilliseconds == Int32.max, "clamped to a C int")
    }

    @Test func oldLibrdkafkaIsRefusedUnlessOverridden() throws {
        let debian = 0x0200_02ff  // 2.0.2
        let error = #expect(throws: KafkaError.self) { try KafkaRuntime.check(environment: [:], version: debian) }
        #expect(error?.code == .unsupportedRuntime)
        #expect(error?.message.contains("2.0.2") == true)
        #expect(error?.message.contains("install-deps") == true)
        try KafkaRuntime.check(environment: [KafkaRuntime.overrideVariable: "1"], version: debian)
        try KafkaRuntime.check(environment: [:], version: 0x0210_00ff)
        #expect(KafkaRuntime.isSupported(version: 0x0201_0000))
        #expect(!KafkaRuntime.isSupported(version: 0x0200_ffff))
    }

    /// The consumer reads librdkafka's fetch buffer for the header count only on releases that
    /// were checked for it; any other release parses headers the documented way.
    @Test func theHeaderShortcutIsLimitedToVerifiedReleases() {
        #expect(KafkaRuntime.headerShortcutVerified(version: 0x0210_00ff))  // 2.16.0
        #expect(KafkaRuntime.headerShortcutVerified(version: 0x0210_01ff))  // 2.16.1
        #expect(!KafkaRuntime.headerShortcutVerified(version: 0x020f_00ff))  // 2.15.0
        #expect(!KafkaRuntime.headerShortcutVerified(version: 0x0211_00ff))  // 2.17.0
        #expect(!KafkaRuntime.headerShortcutVerified(version: 0x0310_00ff))  // 3.16.0
    }
}
