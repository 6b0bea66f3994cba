/// Maps JSON keys (as raw bytes) to small field numbers without building strings.
///
/// Keys of up to 32 bytes are packed into four little-endian words plus a length; lookup is a
/// multiplicative hash into an open-addressed table and five integer comparisons. Longer keys
/// are never known fields, so they miss immediately. Built once per decoder type (a `static let`
/// constant), never mutated.
///
/// **Expected order.** An upstream sends its keys in the same order every time, and the table
/// knows it: the keys are declared in that order, one list per naming scheme (a format whose keys
/// have other names, such as Upbit's SIMPLE, is a scheme of its own). After a key, the scanner
/// first compares the input against the key that followed it in its scheme (two or three word
/// comparisons, its closing quote included), then the few after it (a message may leave optional
/// keys out), and only reads and hashes the key when none was it
/// (``JSONScanner/nextKey(_:in:expected:)``). An unknown key in between leaves the expectation
/// where it was. Two names declared in a row for the same field are alternatives: the key before
/// them expects the first, and both expect the key after them.
struct KeyTable: Sendable {
    private struct Entry: Sendable {
        var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0
        var length: Int = 0
        var id: Int = -1
        /// The entry (an index into `entries`) of the key expected after this one; -1 for none.
        var next: Int = -1
        /// The key's bytes followed by its closing quote, as little-endian words; the last one
        /// holds only `quotedMask`'s bytes.
        var q0: UInt64 = 0, q1: UInt64 = 0, q2: UInt64 = 0, q3: UInt64 = 0
        var quotedMask: UInt64 = 0
        /// Words of key + quote (1...4); 0 for a key of 32 bytes (never expected, always hashed).
        var quotedWords: Int = 0
    }

    /// Open-addressed hash table of indexes into `entries` (-1: empty).
    private var slots: [Int]
    private let mask: Int
    /// Every key in declaration order: scheme after scheme, each in its upstream's order.
    private let entries: [Entry]

    /// The field number of a key the upstream sends and the decoder does not read: listing it
    /// keeps the expected order in step (the key is matched, not scanned and hashed), and its
    /// value is skipped like an unknown key's.
    static let ignored = -1

    /// `keys`: (key text, field number), in the order the upstream sends them.
    init(_ keys: [(String, Int)]) { self.init(schemes: [keys]) }

    /// Several naming schemes for the same fields (DEFAULT and SIMPLE names), each in the order
    /// its upstream sends them. A field number may appear in several schemes.
    init(schemes: [[(String, Int)]]) {
        var entries: [Entry] = []
        for scheme in schemes {
            let first = entries.count
            for (offset, (text, id)) in scheme.enumerated() {
                let bytes = Array(text.utf8)
                precondition(bytes.count <= 32, "KeyTable keys are at most 32 bytes: \(text)")  // programmer error, not data
                var e = Entry()
                (e.w0, e.w1, e.w2, e.w3) = bytes.withUnsafeBytes { KeyTable.pack($0) }
                e.length = bytes.count
                e.id = id
                // Two names in a row for one field are alternatives (`code` in a WebSocket frame,
                // `market` in a REST one): a message holds one of them, so the first expects what
                // follows both.
                let isAlternative = offset + 1 < scheme.count && id != KeyTable.ignored && scheme[offset + 1].1 == id
                let next = offset + (isAlternative ? 2 : 1)
                e.next = next < scheme.count ? first + next : -1
                let quoted = bytes + [UInt8(ascii: "\"")]
                if quoted.count <= 32 {
                    (e.q0, e.q1, e.q2, e.q3) = quoted.withUnsafeBytes { KeyTable.pack($0) }
                    e.quotedWords = (quoted.count + 7) / 8
                    let tail = quoted.count - (e.quotedWords - 1) * 8
                    e.quotedMask = tail == 8 ? ~0 : (1 << UInt64(tail * 8)) - 1
                }
                entries.append(e)
            }
        }
        self.entries = entries
        firstExpected = entries.isEmpty ? -1 : 0
        var size = 16
        while size < entries.count * 4 { size *= 2 }
        slots = Array(repeating: -1, count: size)
        mask = size - 1
        for (index, e) in entries.enumerated() {
            var i = KeyTable.hash(e.w0, e.w1, e.w2, e.w3, e.length) & mask
            while slots[i] >= 0 {
                let o = entries[slots[i]]
                precondition(
                    o.length != e.length || (o.w0, o.w1, o.w2, o.w3) != (e.w0, e.w1, e.w2, e.w3),
                    "KeyTable: a key declared twice")  // programmer error, not data
                i = (i + 1) & mask
            }
            slots[i] = index
        }
    }

    /// The entry to expect first in an object: the first key of the first scheme.
    let firstExpected: Int

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
        let i = find(w0, w1, w2, w3, key.count)
        return i < 0 || entries[i].id < 0 ? nil : entries[i].id
    }

    /// ``lookup(_:)`` for a key of `count` bytes at `key` that may read up to `readable` bytes
    /// from there (a key inside its JSON text, with its closing quote and more after it): each
    /// word of the key is one load, masked to the key's length, instead of a byte at a time.
    @inline(__always)
    func lookup(_ key: UnsafeRawPointer, count n: Int, readable: Int) -> Int? {
        let i = entry(key, count: n, readable: readable)
        return i < 0 || entries[i].id < 0 ? nil : entries[i].id
    }

    /// The index of the entry for a key of `n` bytes at `key`; -1 for none.
    @inline(__always)
    fileprivate func entry(_ key: UnsafeRawPointer, count n: Int, readable: Int) -> Int {
        guard n <= 32 else { return -1 }
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
    private func find(_ w0: UInt64, _ w1: UInt64, _ w2: UInt64, _ w3: UInt64, _ n: Int) -> Int {
        var i = KeyTable.hash(w0, w1, w2, w3, n) & mask
        while true {
            let index = slots[i]
            if index < 0 { return -1 }
            let e = entries[index]
            if e.length == n && e.w0 == w0 && e.w1 == w1 && e.w2 == w2 && e.w3 == w3 { return index }
            i = (i + 1) & mask
        }
    }

    /// Field number, length and the entry expected next, of entry `index`.
    @inline(__always) fileprivate func id(_ index: Int) -> Int { entries[index].id }
    @inline(__always) fileprivate func length(_ index: Int) -> Int { entries[index].length }
    @inline(__always) fileprivate func next(_ index: Int) -> Int { entries[index].next }

    /// The entry at `text` among `expected` and the few that follow it in its scheme (a message
    /// that leaves out optional keys skips some), or -1: then the key is read and hashed.
    @inline(__always)
    fileprivate func matchExpected(_ expected: Int, at text: UnsafeRawPointer, readable: Int) -> Int {
        var candidate = expected
        for _ in 0..<KeyTable.lookahead {
            guard candidate >= 0 else { return -1 }
            if isExpected(candidate, at: text, readable: readable) { return candidate }
            candidate = entries[candidate].next
        }
        return -1
    }

    /// How many entries of the expected order a key is compared with before it is hashed.
    static let lookahead = 4

    /// Whether the input at `text` (just after a key's opening quote, `readable` bytes available)
    /// is entry `expected`'s key and its closing quote; false also when too few bytes are left to
    /// compare whole words (the caller then reads the key the ordinary way).
    @inline(__always)
    fileprivate func isExpected(_ expected: Int, at text: UnsafeRawPointer, readable: Int) -> Bool {
        entries.withUnsafeBufferPointer { all in
            let e = all.baseAddress! + expected
            let words = e.pointee.quotedWords
            guard words > 0, words &* 8 <= readable else { return false }
            @inline(__always) func load(_ i: Int) -> UInt64 {
                UInt64(littleEndian: text.loadUnaligned(fromByteOffset: i &* 8, as: UInt64.self))
            }
            let m = e.pointee.quotedMask
            if words == 1 { return load(0) & m == e.pointee.q0 }
            guard load(0) == e.pointee.q0 else { return false }
            if words == 2 { return load(1) & m == e.pointee.q1 }
            guard load(1) == e.pointee.q1 else { return false }
            if words == 3 { return load(2) & m == e.pointee.q2 }
            guard load(2) == e.pointee.q2 else { return false }
            return load(3) & m == e.pointee.q3
        }
    }
}

/// A key read by ``JSONScanner/nextKey(_:in:expected:)``: where it is, and its field number in
/// the table (-1 for a key the table does not know or lists as ``KeyTable/ignored``).
struct JSONKey {
    var span: JSONSpan
    var field: Int
}

extension JSONScanner {
    /// Reads the next key and its `:` like ``nextKey(_:)`` and looks it up in `table`; nil after
    /// the closing `}`. `expected` (start with `table.firstExpected`) is the entry predicted next:
    /// when the input holds exactly that key, it is neither scanned nor hashed. It moves on to
    /// the entry after each known key; an unknown key leaves it.
    @inline(__always)
    mutating func nextKey(_ first: inout Bool, in table: KeyTable, expected: inout Int) throws(DecodeFailure) -> JSONKey? {
        // The common case, small enough to inline: no whitespace, `,"` (or `"` for the first key),
        // the expected key, `":`. Anything else takes the general path.
        let quote = first ? pos : pos &+ 1
        if expected >= 0, quote &+ 1 < count, first || byte(pos) == UInt8(ascii: ","), byte(quote) == UInt8(ascii: "\"") {
            let start = quote &+ 1
            let matched = withSpanStart(JSONSpan(start: start, end: start, escaped: false)) { text, readable in
                table.isExpected(expected, at: text, readable: readable)
            }
            if matched {
                let e = expected
                let end = start &+ table.length(e)
                if end &+ 1 < count, byte(end &+ 1) == UInt8(ascii: ":") {
                    move(to: end &+ 2)
                    first = false
                    expected = table.next(e)
                    return JSONKey(span: JSONSpan(start: start, end: end, escaped: false), field: table.id(e))
                }
            }
        }
        return try nextKeyInGeneral(&first, in: table, expected: &expected)
    }

    /// ``nextKey(_:in:expected:)`` for any input: whitespace, the closing `}`, keys further on in
    /// the expected order, keys out of order, unknown and escaped keys.
    @inline(never)
    private mutating func nextKeyInGeneral(_ first: inout Bool, in table: KeyTable, expected: inout Int) throws(DecodeFailure) -> JSONKey? {
        guard try openKey(&first) else { return nil }
        let start = pos &+ 1
        let e = withSpanStart(JSONSpan(start: start, end: start, escaped: false)) { text, readable in
            table.matchExpected(expected, at: text, readable: readable)
        }
        if e >= 0 {
            let end = start &+ table.length(e)
            try skipKey(to: end &+ 1)
            expected = table.next(e)
            return JSONKey(span: JSONSpan(start: start, end: end, escaped: false), field: table.id(e))
        }
        let key = try readStringSpan()
        guard try peek() == UInt8(ascii: ":") else { throw syntax("expected ':'") }
        skip(1)
        let found: Int
        if !key.escaped {
            found = withSpanStart(key) { raw, readable in table.entry(raw, count: key.end &- key.start, readable: readable) }
        } else {
            found = try unescaped(key).withUnsafeBytes { raw in
                table.entry(raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: raw.count, readable: raw.count)
            }
        }
        guard found >= 0 else { return JSONKey(span: key, field: -1) }
        expected = table.next(found)
        return JSONKey(span: key, field: table.id(found))
    }

    /// The key text, for error paths only (slow, fine: errors are rare).
    func keyName(_ key: JSONSpan) -> String {
        (try? string(key)) ?? "?"
    }

    func keyName(_ key: JSONKey) -> String { keyName(key.span) }
}
