import CKafka

/// The librdkafka library loaded at run time.
public enum KafkaRuntime {
    /// The oldest librdkafka that talks to current brokers. 2.0.2 (Debian 12) misparses tagged
    /// fields in ApiVersions v3 responses and fails every connection to tansu and KRaft brokers.
    public static let minimumVersion = (major: 2, minor: 1, patch: 0)

    /// Environment variable that lets an operator run on an older librdkafka anyway.
    public static let overrideVariable = "PIPELINE_ALLOW_OLD_LIBRDKAFKA"

    /// `rd_kafka_version_str()`, e.g. `"2.16.0"`.
    public static var versionString: String { String(cString: rd_kafka_version_str()) }

    static func versionString(_ v: Int) -> String { "\(v >> 24 & 0xff).\(v >> 16 & 0xff).\(v >> 8 & 0xff)" }

    /// `rd_kafka_version()`: `0xMMmmrrxx`.
    public static var version: Int { Int(rd_kafka_version()) }

    public static var isSupported: Bool { isSupported(version: version) }

    /// Whether an `rd_kafka_version()` value is at least ``minimumVersion``.
    public static func isSupported(version: Int) -> Bool {
        let v = minimumVersion
        return version >= (v.major << 24 | v.minor << 16 | v.patch << 8)
    }

    /// librdkafka releases (major, minor) whose v2 record parsing was read and tested for the
    /// consumer's header shortcut (`RDKafkaConsumer.hasNoHeaders`: the header count byte right
    /// after the value in the fetch buffer, `rd_kafka_msgset_reader_msg_v2`). Add a release only
    /// after reading that function in it and running `MockClusterTests.headersSurviveMixedWithRecordsWithoutThem` on it.
    static let headerShortcutReleases: [(major: Int, minor: Int)] = [(2, 16)]

    /// Whether the consumer may skip `rd_kafka_message_headers` for records whose header count
    /// byte is 0 on this `rd_kafka_version()`.
    static func headerShortcutVerified(version: Int) -> Bool {
        headerShortcutReleases.contains { $0.major == version >> 24 & 0xff && $0.minor == version >> 16 & 0xff }
    }

    /// Throws ``KafkaError/Code/unsupportedRuntime`` when the loaded librdkafka is older than
    /// ``minimumVersion`` and the override is not set. Every program calls this at start.
    public static func check(environment: [String: String], version: Int = KafkaRuntime.version) throws(KafkaError) {
        guard !isSupported(version: version) else { return }
        if let value = environment[overrideVariable], value == "1" || value.lowercased() == "true" { return }
        throw KafkaError(
            code: .unsupportedRuntime,
            message: """
                librdkafka \(versionString(version)) was loaded, but 2.1.0 or newer is needed \
                (2.0.x cannot read current brokers' ApiVersions responses). \
                Run scripts/install-deps and start programs with LD_LIBRARY_PATH=.deps/librdkafka \
                (the scripts in scripts/ do this), or set \(overrideVariable)=1 to proceed anyway.
                """
        )
    }
}
