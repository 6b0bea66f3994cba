extension InputRecord {
    /// A deterministic identity of this input: its upstream `dedupe-key` header when it has one
    /// (records produced by a stage, or forwarded inside a ``Chain``), else `topic/partition/offset`.
    /// Stages derive their outputs' dedupe keys from it, so a redelivered record yields the same keys.
    public var identity: String {
        var identity = ""
        appendIdentity(to: &identity)
        return identity
    }

    /// Appends ``identity`` to `key` without building it apart: stages that derive a dedupe key
    /// per output build it in one string (the per-record hot path).
    public func appendIdentity(to key: inout String) {
        if let upstream = headers.string(named: OutputRecord.dedupeKeyHeader) {
            key += upstream
            return
        }
        key += origin.topic
        key += "/"
        key += String(origin.partition)
        key += "/"
        key += String(origin.offset)
    }

    /// The value, or a failure saying the record is a tombstone.
    func requireValue() throws(DecodeFailure) -> [UInt8] {
        guard let value else { throw DecodeFailure(field: "$", reason: .emptyValue, detail: "tombstone (null value)") }
        return value
    }
}

extension Int64 {
    /// `self + other`, clamped to the representable range: record timestamps come from outside,
    /// and window arithmetic on a hostile `Int64.max` must not trap.
    func saturatingAdd(_ other: Int64) -> Int64 {
        let (r, o) = addingReportingOverflow(other)
        return o ? (other > 0 ? .max : .min) : r
    }

    /// `self - other`, clamped to the representable range.
    func saturatingSub(_ other: Int64) -> Int64 {
        let (r, o) = subtractingReportingOverflow(other)
        return o ? (other < 0 ? .max : .min) : r
    }
}

/// FNV-1a 64: a hash that is the same in every process and run (Swift's `Hasher` is seeded per
/// process), for dedupe keys and partition choice.
public func fnv1a(_ bytes: some Sequence<UInt8>) -> UInt64 {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in bytes {
        h ^= UInt64(b)
        h &*= 0x100_0000_01b3
    }
    return h
}

/// ``fnv1a(_:)`` of the text's UTF-8, as 16 hex digits.
func stableHash(_ s: String) -> String {
    let hex = String(fnv1a(s.utf8), radix: 16)
    return String(repeating: "0", count: 16 - hex.count) + hex
}
