import CKafka

/// Builds an `rd_kafka_conf_t` from librdkafka key/value pairs, reporting the first bad key by name.
enum RDKafkaConfig {
    /// Returns an owned `rd_kafka_conf_t`; ownership passes to `rd_kafka_new` on its success.
    static func make(_ properties: [String: String]) throws(KafkaError) -> OpaquePointer {
        let conf = rd_kafka_conf_new()!
        // Sorted so that the key reported for a bad configuration does not depend on hashing.
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            do throws(KafkaError) {
                try set(conf, key, value)
            } catch {
                rd_kafka_conf_destroy(conf)
                throw error
            }
        }
        return conf
    }

    /// librdkafka quotes a rejected value in its message; a secret must not leak that way.
    static func redact(_ reason: String, key: String, value: String) -> String {
        guard Secret.isSecretKey(key), !value.isEmpty else { return reason }
        return reason.replacingOccurrences(of: value, with: "<redacted>")
    }

    static func set(_ conf: OpaquePointer, _ key: String, _ value: String) throws(KafkaError) {
        var errstr = [CChar](repeating: 0, count: 512)
        let result = rd_kafka_conf_set(conf, key, value, &errstr, errstr.count)
        guard result != RD_KAFKA_CONF_OK else { return }
        let reason = redact(string(fromErrorBuffer: errstr), key: key, value: value)
        switch result {
        case RD_KAFKA_CONF_UNKNOWN:
            throw .invalidConfiguration(key: key, "unknown configuration key \"\(key)\": \(reason)")
        default:
            throw .invalidConfiguration(key: key, "invalid value for \"\(key)\": \(reason)")
        }
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var rest = self[...]
        while let range = rest.range(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}
