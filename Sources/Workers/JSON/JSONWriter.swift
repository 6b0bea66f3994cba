/// Appends compact JSON to a byte buffer. Used for stage outputs, notifications and dead letters;
/// writes keys in the order given so outputs are byte-for-byte deterministic (golden tests,
/// dedupe).
public struct JSONWriter: Sendable {
    /// The bytes written so far. Reading it trims the zeroed slack the writer keeps ahead.
    public var bytes: [UInt8] {
        mutating get {
            if storage.count > count { storage.removeLast(storage.count - count) }
            return storage
        }
    }
    /// Written bytes, then zeroed slack: every write is one capacity check and plain stores into
    /// the buffer, not an `append` per byte or per piece.
    private var storage: [UInt8]
    private var count = 0
    /// Whether the next value in the current container needs a comma first.
    private var needsComma = false

    public init(capacity: Int = 256) { storage = Array(repeating: 0, count: max(capacity, 16)) }

    /// A writer that appends to `bytes` (what ``StageOutput`` writes its values with: no
    /// buffer of the writer's own); ``finish()`` gives them back with the value after them.
    init(continuing bytes: consuming [UInt8]) {
        count = bytes.count
        storage = bytes
    }

    /// The bytes written, the writer ended: the buffer is handed over, not shared (a copy of
    /// ``bytes`` would share it until the writer goes, and the next append would copy it all).
    consuming func finish() -> [UInt8] {
        if storage.count > count { storage.removeLast(storage.count - count) }
        return storage
    }

    /// Runs `body` on room for `n` more bytes; `body` returns how many it wrote.
    @inline(__always)
    private mutating func write(upTo n: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int) {
        if count + n > storage.count { grow(by: count + n - storage.count) }
        let start = count
        count += storage.withUnsafeMutableBufferPointer { body($0.baseAddress! + start) }
    }

    /// Adds zeroed slack, at least 256 bytes (the array's capacity grows geometrically
    /// underneath), copied from a block of zeros: a `repeatElement` append stores them one by one.
    @inline(never)
    private mutating func grow(by needed: Int) {
        var left = max(256, needed)
        while left > 0 {
            let n = min(left, Self.zeros.count)
            storage.append(contentsOf: Self.zeros[..<n])
            left -= n
        }
    }

    private static let zeros = [UInt8](repeating: 0, count: 4096)

    @inline(__always)
    private mutating func append(_ byte: UInt8) { write(upTo: 1) { $0.pointee = byte; return 1 } }

    private mutating func append(_ utf8: UnsafeBufferPointer<UInt8>) {
        guard let source = utf8.baseAddress else { return }
        write(upTo: utf8.count) { $0.update(from: source, count: utf8.count); return utf8.count }
    }

    private mutating func append(_ s: StaticString) {
        s.withUTF8Buffer { append($0) }
    }

    private mutating func separate() {
        if needsComma { append(UInt8(ascii: ",")) }
        needsComma = true
    }

    public mutating func beginObject() { separate(); append(UInt8(ascii: "{")); needsComma = false }
    public mutating func endObject() { append(UInt8(ascii: "}")); needsComma = true }
    public mutating func beginArray() { separate(); append(UInt8(ascii: "[")); needsComma = false }
    public mutating func endArray() { append(UInt8(ascii: "]")); needsComma = true }

    /// Writes `"name":` for a literal key; the next call writes its value. The common case:
    /// no String bridging, one write of the bytes the literal already holds.
    @inline(__always)
    public mutating func key(_ name: StaticString) {
        // A one-scalar literal has no pointer; a literal with a quote, backslash or control byte needs escaping.
        guard name.hasPointerRepresentation,
              Self.isPlain(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        else { return key(text: name.description) }
        let n = name.utf8CodeUnitCount, source = name.utf8Start
        let comma = needsComma
        write(upTo: n + 4) { out in
            var i = 0
            if comma { out[0] = UInt8(ascii: ","); i = 1 }
            out[i] = UInt8(ascii: "\"")
            (out + i + 1).update(from: source, count: n)
            i += 1 + n
            out[i] = UInt8(ascii: "\"")
            out[i + 1] = UInt8(ascii: ":")
            return i + 2
        }
        needsComma = false
    }

    /// Writes `"name":` for a key known only at run time (escaped when it needs it).
    public mutating func key(text name: String) {
        var name = name
        name.withUTF8 { utf8 in
            // `,"name":` in one write when the name needs no escape.
            if Self.isPlain(utf8) {
                let comma = needsComma
                write(upTo: utf8.count + 4) { out in
                    var i = 0
                    if comma { out[0] = UInt8(ascii: ","); i = 1 }
                    out[i] = UInt8(ascii: "\"")
                    if let name = utf8.baseAddress { (out + i + 1).update(from: name, count: utf8.count) }
                    i += 1 + utf8.count
                    out[i] = UInt8(ascii: "\"")
                    out[i + 1] = UInt8(ascii: ":")
                    return i + 2
                }
            } else {
                separate()
                append(UInt8(ascii: "\""))
                appendEscaped(utf8)
                append(UInt8(ascii: "\""))
                append(UInt8(ascii: ":"))
            }
        }
        needsComma = false
    }

    public mutating func string(_ s: String) { separate(); appendQuoted(s) }
    public mutating func int(_ v: Int64) { separate(); appendInteger(v) }
    public mutating func int(_ v: Int) { int(Int64(v)) }
    public mutating func bool(_ v: Bool) { separate(); append(v ? "true" : "false") }
    public mutating func null() { separate(); append("null") }

    /// Shortest representation that reads back to the same Double; non-finite values (which the
    /// decoders never produce) are written as null since JSON has no NaN.
    public mutating func double(_ v: Double) {
        separate()
        guard v.isFinite else { append("null"); return }
        if abs(v) < 1e15, v == Double(Int64(v)) {
            appendInteger(Int64(v))
        } else if !appendShortDecimal(v) {
            var text = v.description
            text.withUTF8 { append($0) }
        }
    }

    private mutating func appendInteger(_ v: Int64) {
        appendFixed(v.magnitude, fractionDigits: 0, negative: v < 0)
    }

    /// A price or a volume with a few decimals (`1234.5`, `0.0123`), the common case, written to
    /// the same bytes as `description` without it: the fewest fractional digits `k` whose
    /// decimal reads back as `v`. `v * 10^k` must come out as an integer `n` with `n / 10^k == v`
    /// (exact: both are below 2^52, and IEEE division rounds as a parser does; `n` is then the
    /// nearest such decimal), and neither `k - 1` digit neighbour may read back as `v` (else it
    /// is shorter). False leaves the value to `description` (exponents, long fractions).
    private mutating func appendShortDecimal(_ v: Double) -> Bool {
        let magnitude = abs(v)
        guard magnitude >= 1e-3, magnitude < 1e7 else { return false }
        for k in 1...8 {
            let p = powersOfTen[k]
            let scaled = magnitude * p
            guard scaled < 4.0e15 else { return false }
            let n = scaled.rounded(.towardZero)
            guard n == scaled else { continue }
            guard n / p == magnitude else { return false }
            let whole = UInt64(n)
            let shorter = powersOfTen[k - 1]
            if Double(whole / 10) / shorter == magnitude || Double(whole / 10 + 1) / shorter == magnitude { return false }
            appendFixed(whole, fractionDigits: k, negative: v < 0)
            return true
        }
        return false
    }

    /// `whole / 10^fractionDigits` in fixed notation (an integer for 0), with at least one digit
    /// before the point, written from a stack buffer in one write, two digits per division.
    private mutating func appendFixed(_ whole: UInt64, fractionDigits: Int, negative: Bool) {
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)  // 32 bytes: 20 digits, point, sign
        withUnsafeMutableBytes(of: &digits) { buffer in
            let out = buffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var i = buffer.count
            if fractionDigits > 0 {
                let scale = powersOfTenInt[fractionDigits]
                Self.putDigits(whole % scale, atLeast: fractionDigits, out, &i)
                i &-= 1
                out[i] = UInt8(ascii: ".")
                Self.putDigits(whole / scale, atLeast: 1, out, &i)
            } else {
                Self.putDigits(whole, atLeast: 1, out, &i)
            }
            if negative { i &-= 1; out[i] = UInt8(ascii: "-") }
            let n = buffer.count &- i
            write(upTo: n) { $0.update(from: out + i, count: n); return n }
        }
    }

    /// The decimal digits of `v`, zero-padded to `atLeast`, ending just before `out[i]`; `i` moves to the first.
    @inline(__always)
    private static func putDigits(_ v: UInt64, atLeast: Int, _ out: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        let pairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
        let end = i
        var v = v
        while v >= 100 {
            let r = Int(truncatingIfNeeded: v % 100) &* 2
            v /= 100
            i &-= 2
            out[i] = pairs.utf8Start[r]
            out[i &+ 1] = pairs.utf8Start[r &+ 1]
        }
        if v >= 10 {
            let r = Int(truncatingIfNeeded: v) &* 2
            i &-= 2
            out[i] = pairs.utf8Start[r]
            out[i &+ 1] = pairs.utf8Start[r &+ 1]
        } else {
            i &-= 1
            out[i] = UInt8(truncatingIfNeeded: v) &+ 0x30
        }
        while end &- i < atLeast {
            i &-= 1
            out[i] = UInt8(ascii: "0")
        }
    }

    /// No byte of `utf8` needs an escape in a JSON string (eight bytes at a time, then the rest).
    @inline(__always)
    private static func isPlain(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = utf8.baseAddress else { return true }
        var i = 0
        while i &+ 8 <= utf8.count {
            if JSONSpecialBytes.present(in: UnsafeRawPointer(base).loadUnaligned(fromByteOffset: i, as: UInt64.self)) { return false }
            i &+= 8
        }
        while i < utf8.count {
            let b = base[i]
            if b < 0x20 || b == 0x22 || b == 0x5C { return false }
            i &+= 1
        }
        return true
    }

    /// `s` as a JSON string literal, quotes included (the one JSON string escaper of the project).
    public static func quoted(_ s: String) -> String {
        var w = JSONWriter(capacity: s.utf8.count + 2)
        w.string(s)
        return String(decoding: w.bytes, as: UTF8.self)
    }

    /// Embeds already-encoded JSON (trusted: produced by this writer).
    public mutating func raw(_ json: [UInt8]) { separate(); json.withUnsafeBufferPointer { append($0) } }

    public mutating func optional(_ v: String?) { if let v { string(v) } else { null() } }
    public mutating func optional(_ v: Double?) { if let v { double(v) } else { null() } }
    public mutating func optional(_ v: Int64?) { if let v { int(v) } else { null() } }

    /// A string given as UTF-8 bytes (valid UTF-8: text a decoder kept, see ``TextBuffer``).
    mutating func string(utf8: UnsafeBufferPointer<UInt8>) { separate(); appendQuoted(utf8) }

    private mutating func appendQuoted(_ s: String) {
        var s = s
        // Native strings are contiguous UTF-8.
        s.withUTF8 { appendQuoted($0) }
    }

    private mutating func appendQuoted(_ utf8: UnsafeBufferPointer<UInt8>) {
        // Most strings need no escape: quotes and text in one write.
        if Self.isPlain(utf8) {
            write(upTo: utf8.count + 2) { out in
                out[0] = UInt8(ascii: "\"")
                if let text = utf8.baseAddress { (out + 1).update(from: text, count: utf8.count) }
                out[utf8.count + 1] = UInt8(ascii: "\"")
                return utf8.count + 2
            }
        } else {
            append(UInt8(ascii: "\""))
            appendEscaped(utf8)
            append(UInt8(ascii: "\""))
        }
    }

    private mutating func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>) {
        for b in utf8 {
            switch b {
            case UInt8(ascii: "\""): append(#"\""#)
            case UInt8(ascii: "\\"): append(#"\\"#)
            case 0x0A: append(#"\n"#)
            case 0x0D: append(#"\r"#)
            case 0x09: append(#"\t"#)
            case 0..<0x20:
                let hex: StaticString = "0123456789abcdef"
                append(#"\u00"#)
                append(hex.utf8Start[Int(b >> 4)])
                append(hex.utf8Start[Int(b & 15)])
            default: append(b)
            }
        }
    }
}

/// The bytes a JSON string cannot hold as they are: `"`, `\\` and control characters.
enum JSONSpecialBytes {
    /// Whether any of the eight bytes of `word` (little-endian) is one of them. The classic exact
    /// "has a zero byte" / "has a byte below n" bit tricks: no false positive, no false negative.
    @inline(__always)
    static func present(in word: UInt64) -> Bool { mask(word) != 0 }

    /// The high bit of each flagged byte of `word` (loaded little-endian: byte 0 in the lowest
    /// bits). A borrow can flag a byte above a special one that is not special itself, never
    /// one below it, so the lowest flag is exact: `mask.trailingZeroBitCount / 8` is the index of
    /// the first special byte.
    @inline(__always)
    static func mask(_ word: UInt64) -> UInt64 {
        let w = UInt64(littleEndian: word)
        let quote = w ^ 0x2222_2222_2222_2222
        let backslash = w ^ 0x5C5C_5C5C_5C5C_5C5C
        let special =
            ((quote &- 0x0101_0101_0101_0101) & ~quote)
            | ((backslash &- 0x0101_0101_0101_0101) & ~backslash)
            | ((w &- 0x2020_2020_2020_2020) & ~w)
        return special & 0x8080_8080_8080_8080
    }
}
