extension InputRecord {
    /// A deterministic identity of this input: its content's key when its topic identifies records
    /// by content (``identifiedByContent``), else its upstream `dedupe-key` header when it has one
    /// (records produced by a transform, or forwarded inside a ``Chain``), else `topic/partition/offset`.
    /// Stages derive their outputs' dedupe keys from it, so a redelivered record yields the same keys.
    public var identity: String { .dedupeKey { $0.appendIdentity(of: self) } }

    /// The value, or a failure saying the record is a tombstone.
    func requireValue() throws(DecodeFailure) -> ArraySlice<UInt8> {
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

/// FNV-1a 128 (the FNV authors' 128-bit offset basis and prime, 2^88 + 0x13B), for
/// ``OutputRecord/contentDedupeKey(key:value:)``: 128 bits, so that a topic's lifetime of keys does not
/// collide, and simple enough for any consumer to compute in a few lines.
struct FNV1a128 {
    private var high: UInt64 = 0x6c62_272e_07bb_0142
    private var low: UInt64 = 0x62b8_2175_6295_c58d

    mutating func add(_ bytes: some Sequence<UInt8>) {
        for b in bytes {
            low ^= UInt64(b)
            // (high, low) × (2^88 + 0x13B), modulo 2^128.
            let (carry, product) = low.multipliedFullWidth(by: 0x13B)
            high = high &* 0x13B &+ carry &+ (low << 24)
            low = product
        }
    }

    /// A length as 4 big-endian bytes, `FFFFFFFF` for none.
    mutating func add(length: Int?) {
        let n = length.map { UInt32(truncatingIfNeeded: $0) } ?? .max
        add([UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)])
    }

    /// The hash as 32 lowercase hex digits.
    var hex: String {
        func digits(_ v: UInt64) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: 16 - s.count) + s
        }
        return digits(high) + digits(low)
    }
}

/// ``fnv1a(_:)`` of the text's UTF-8, as 16 hex digits.
func stableHash(_ s: String) -> String {
    let hex = String(fnv1a(s.utf8), radix: 16)
    return String(repeating: "0", count: 16 - hex.count) + hex
}

/// Writes a dedupe key's pieces straight into a buffer: no intermediate strings, for transforms that
/// key every output (the per-record hot path: six `+=` and two integer conversions per key cost a
/// transform at the ticker feed's rate several per cent). ``Swift/String/dedupeKey(_:)`` writes into
/// a stack buffer and makes the string from it in one allocation; a key longer than the buffer
/// runs the closure a second time, into the string's own storage.
public struct DedupeKeyWriter {
    private let base: UnsafeMutablePointer<UInt8>?
    private let capacity: Int
    /// The key's length so far, whether or not its bytes fitted.
    fileprivate private(set) var count = 0

    fileprivate init(base: UnsafeMutablePointer<UInt8>?, capacity: Int) {
        self.base = base
        self.capacity = capacity
    }

    /// Whether every piece so far was written (the key fits the buffer).
    fileprivate var fitted: Bool { count <= capacity }

    @inline(__always)
    private mutating func append(_ bytes: UnsafePointer<UInt8>?, _ n: Int) {
        if let base, let bytes, count &+ n <= capacity {
            ShortBytes.copy(from: UnsafeRawPointer(bytes), to: UnsafeMutableRawPointer(base + count), count: n)
        }
        count &+= n
    }

    public mutating func append(_ s: StaticString) {
        // A one-scalar literal (`":"`) has no pointer: `withUTF8Buffer` encodes it.
        s.withUTF8Buffer { append($0.baseAddress, $0.count) }
    }

    /// Text known only at run time. Disfavoured, so that a literal (`":"`) is the `StaticString`
    /// above: as a `String` it cost a retain, a release and a call into `memcpy` (six literals in
    /// each tick's key: BENCHMARKS.md, the hot path's section).
    @_disfavoredOverload
    public mutating func append(_ s: String) {
        var s = s
        s.withUTF8 { append($0.baseAddress, $0.count) }
    }

    /// The decimal digits of `n` (with a `-` when negative), as `String(n)` writes them.
    public mutating func append(_ n: Int64) {
        let length = DecimalDigits.count(n.magnitude) &+ (n < 0 ? 1 : 0)
        if let base, count &+ length <= capacity {
            var at = count &+ length
            DecimalDigits.write(n.magnitude, base, &at)
            if n < 0 { base[count] = UInt8(ascii: "-") }
        }
        count &+= length
    }

    public mutating func append(_ n: Int) { append(Int64(n)) }
    public mutating func append(_ n: Int32) { append(Int64(n)) }

    /// The input's ``InputRecord/identity``.
    public mutating func appendIdentity(of record: InputRecord) {
        if record.identifiedByContent {
            append(OutputRecord.contentDedupeKey(key: record.key, value: record.value))
            return
        }
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
    /// `write` may run twice (for a key longer than 256 bytes) and must write the same pieces both times.
    public static func dedupeKey(_ write: (inout DedupeKeyWriter) -> Void) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { stack in
            var writer = DedupeKeyWriter(base: stack.baseAddress, capacity: stack.count)
            write(&writer)
            let length = writer.count
            if writer.fitted {
                return String(unsafeUninitializedCapacity: length) { buffer in
                    if let to = buffer.baseAddress, let from = stack.baseAddress { to.update(from: from, count: length) }
                    return length
                }
            }
            return String(unsafeUninitializedCapacity: length) { buffer in
                var writer = DedupeKeyWriter(base: buffer.baseAddress, capacity: length)
                write(&writer)
                precondition(writer.count == length, "a dedupe key's pieces changed between two runs of its closure")
                return writer.count
            }
        }
    }
}

extension DedupeKeyWriter {
    /// Room a dedupe key usually fits (the caller keeps it after `start`; a longer key grows it).
    static let usualRoom = 256

    /// Writes the dedupe key `write` writes into `bytes` (a ``TransformOutput``'s buffer) at
    /// `start`, in the room there, growing it when the key does not fit; returns where the key
    /// ends. `write` may run twice (a key longer than the room) and must write the same pieces
    /// both times.
    static func write(_ write: (inout DedupeKeyWriter) -> Void, into bytes: inout [UInt8], at start: Int) -> Int {
        let (length, fitted) = bytes.withUnsafeMutableBufferPointer { buffer in
            var writer = DedupeKeyWriter(base: buffer.baseAddress! + start, capacity: buffer.count &- start)
            write(&writer)
            return (writer.count, writer.fitted)
        }
        if fitted { return start &+ length }
        ZeroRoom.add(atLeast: start &+ length &- bytes.count, to: &bytes)
        bytes.withUnsafeMutableBufferPointer { buffer in
            var writer = DedupeKeyWriter(base: buffer.baseAddress! + start, capacity: length)
            write(&writer)
            precondition(writer.count == length, "a dedupe key's pieces changed between two runs of its closure")
        }
        return start &+ length
    }
}
