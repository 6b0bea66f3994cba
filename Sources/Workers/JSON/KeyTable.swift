/// Maps JSON keys (as raw bytes) to small field numbers without building strings.
///
/// Keys of up to 32 bytes are packed into four little-endian words plus a length; lookup is a
/// multiplicative hash into an open-addressed table and five integer comparisons. Longer keys
/// are never known fields, so they miss immediately. Built once per decoder type (a `static let`
/// constant), never mutated.
struct KeyTable: Sendable {
    private struct Entry: Sendable {
        var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0
        var length: Int = -1  // -1: empty slot
        var id: Int = -1
    }

    private var slots: [Entry]
    private let mask: Int

    /// `keys`: (key text, field number). Several keys may map to one field (DEFAULT and SIMPLE names).
    init(_ keys: [(String, Int)]) {
        var size = 16
        while size < keys.count * 4 { size *= 2 }
        slots = Array(repeating: Entry(), count: size)
        mask = size - 1
        for (text, id) in keys {
            let bytes = Array(text.utf8)
            precondition(bytes.count <= 32, "KeyTable keys are at most 32 bytes: \(text)")  // programmer error, not data
            let (w0, w1, w2, w3) = bytes.withUnsafeBytes { KeyTable.pack($0) }
            var i = KeyTable.hash(w0, w1, w2, w3, bytes.count) & mask
            while slots[i].length >= 0 { i = (i + 1) & mask }
            slots[i] = Entry(w0: w0, w1: w1, w2: w2, w3: w3, length: bytes.count, id: id)
        }
    }

    @inline(__always)
    private static func pack(_ raw: UnsafeRawBufferPointer) -> (UInt64, UInt64, UInt64, UInt64) {
        var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let n = raw.count
        guard let base = raw.baseAddress else { return w }
        // Whole words with one unaligned load each, then the tail byte by byte.
        var i = 0
        while i &+ 8 <= n {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            switch i >> 3 {
            case 0: w.0 = word
            case 1: w.1 = word
            case 2: w.2 = word
            default: w.3 = word
            }
            i &+= 8
        }
        while i < n {
            let b = UInt64(raw[i]) << UInt64((i & 7) * 8)
            switch i >> 3 {
            case 0: w.0 |= b
            case 1: w.1 |= b
            case 2: w.2 |= b
            default: w.3 |= b
            }
            i += 1
        }
        return w
    }

    @inline(__always)
    private static func hash(_ w0: UInt64, _ w1: UInt64, _ w2: UInt64, _ w3: UInt64, _ n: Int) -> Int {
        var h = w0 &* 0x9E37_79B9_7F4A_7C15
        h ^= w1 &* 0xC2B2_AE3D_27D4_EB4F
        h ^= w2 &* 0x1656_67B1_9E37_79F9
        h ^= w3 &* 0x27D4_EB2F_1656_67C5
        h ^= UInt64(n)
        return Int(truncatingIfNeeded: h >> 40)
    }

    /// The field number of `key`, or nil if it is not a known key.
    @inline(__always)
    func lookup(_ key: UnsafeRawBufferPointer) -> Int? {
        guard key.count <= 32 else { return nil }
        let (w0, w1, w2, w3) = KeyTable.pack(key)
        return find(w0, w1, w2, w3, key.count)
    }

    /// ``lookup(_:)`` for a key of `count` bytes at `key` that may read up to `readable` bytes
    /// from there (a key inside its JSON text, with its closing quote and more after it): each
    /// word of the key is one load, masked to the key's length, instead of a byte at a time.
    @inline(__always)
    func lookup(_ key: UnsafeRawPointer, count n: Int, readable: Int) -> Int? {
        guard n <= 32 else { return nil }
        @inline(__always) func word(_ offset: Int) -> UInt64 {
            let left = n &- offset
            guard left > 0 else { return 0 }
            if offset &+ 8 <= readable {
                let w = UInt64(littleEndian: key.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                return left >= 8 ? w : w & ((1 &<< UInt64(left &* 8)) &- 1)
            }
            var w: UInt64 = 0
            for j in 0..<min(left, 8) { w |= UInt64(key.load(fromByteOffset: offset &+ j, as: UInt8.self)) &<< UInt64(j &* 8) }
            return w
        }
        return find(word(0), word(8), word(16), word(24), n)
    }

    @inline(__always)
    private func find(_ w0: UInt64, _ w1: UInt64, _ w2: UInt64, _ w3: UInt64, _ n: Int) -> Int? {
        var i = KeyTable.hash(w0, w1, w2, w3, n) & mask
        while true {
            let e = slots[i]
            if e.length < 0 { return nil }
            if e.length == n && e.w0 == w0 && e.w1 == w1 && e.w2 == w2 && e.w3 == w3 { return e.id }
            i = (i + 1) & mask
        }
    }
}

extension JSONScanner {
    /// The field number of a key span (escaped keys are decoded first, so `"\u0063ode"` is `code`).
    func field(_ key: JSONSpan, in table: KeyTable) throws(DecodeFailure) -> Int? {
        if !key.escaped {
            return withSpanStart(key) { raw, readable in
                table.lookup(raw, count: key.end &- key.start, readable: readable)
            }
        }
        return try unescaped(key).withUnsafeBytes { table.lookup($0) }
    }

    /// The key text, for error paths only (slow, fine: errors are rare).
    func keyName(_ key: JSONSpan) -> String {
        (try? string(key)) ?? "?"
    }
}
