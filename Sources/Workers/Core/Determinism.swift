extension InputRecord {
    /// A deterministic identity of this input: its upstream `dedupe-key` header when it has one
    /// (records produced by a stage, or forwarded inside a ``Chain``), else `topic/partition/offset`.
    /// Stages derive their outputs' dedupe keys from it, so a redelivered record yields the same keys.
    public var identity: String { .dedupeKey { $0.appendIdentity(of: self) } }

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

/// Writes a dedupe key's pieces straight into the storage of the new string: one allocation, no
/// intermediate strings, for stages that key every output (the per-record hot path: six `+=`
/// and two integer conversions per key cost a stage at the ticker feed's rate several per cent).
/// ``Swift/String/dedupeKey(_:)`` runs its closure twice: once to count the bytes, once to write them.
public struct DedupeKeyWriter {
    /// Nil in the counting pass.
    private let base: UnsafeMutablePointer<UInt8>?
    fileprivate private(set) var count = 0

    fileprivate init(base: UnsafeMutablePointer<UInt8>?) { self.base = base }

    public mutating func append(_ s: StaticString) {
        if let base { (base + count).update(from: s.utf8Start, count: s.utf8CodeUnitCount) }
        count += s.utf8CodeUnitCount
    }

    public mutating func append(_ s: String) {
        var s = s
        s.withUTF8 { utf8 in
            if let base, let source = utf8.baseAddress { (base + count).update(from: source, count: utf8.count) }
            count += utf8.count
        }
    }

    /// The decimal digits of `n` (with a `-` when negative), as `String(n)` writes them.
    public mutating func append(_ n: Int64) {
        var digits = 1
        var rest = n.magnitude
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        let length = digits + (n < 0 ? 1 : 0)
        if let base {
            if n < 0 { base[count] = UInt8(ascii: "-") }
            var v = n.magnitude
            var at = count + length
            repeat {
                at -= 1
                base[at] = UInt8(truncatingIfNeeded: v % 10) &+ UInt8(ascii: "0")
                v /= 10
            } while v > 0
        }
        count += length
    }

    public mutating func append(_ n: Int) { append(Int64(n)) }
    public mutating func append(_ n: Int32) { append(Int64(n)) }

    /// The input's ``InputRecord/identity``.
    public mutating func appendIdentity(of record: InputRecord) {
        if let upstream = record.headers.string(named: OutputRecord.dedupeKeyHeader) {
            append(upstream)
            return
        }
        append(record.origin.topic)
        append("/")
        append(record.origin.partition)
        append("/")
        append(record.origin.offset)
    }
}

extension String {
    /// A dedupe key written by `write` in one allocation, e.g.
    /// `.dedupeKey { $0.append("tick:"); $0.append(market); $0.append(":"); $0.appendIdentity(of: record) }`.
    /// `write` runs twice and must write the same pieces both times.
    public static func dedupeKey(_ write: (inout DedupeKeyWriter) -> Void) -> String {
        var counter = DedupeKeyWriter(base: nil)
        write(&counter)
        let length = counter.count
        return String(unsafeUninitializedCapacity: length) { buffer in
            var writer = DedupeKeyWriter(base: buffer.baseAddress)
            write(&writer)
            precondition(writer.count == length, "a dedupe key's pieces changed between counting and writing")
            return writer.count
        }
    }
}
