/// Appends compact JSON to a byte buffer. Used for stage outputs, notifications and dead letters;
/// writes keys in the order given so outputs are byte-for-byte deterministic (golden tests,
/// dedupe).
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []
    /// Whether the next value in the current container needs a comma first.
    private var needsComma = false

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        needsComma = true
    }

    public mutating func beginObject() { separate(); bytes.append(UInt8(ascii: "{")); needsComma = false }
    public mutating func endObject() { bytes.append(UInt8(ascii: "}")); needsComma = true }
    public mutating func beginArray() { separate(); bytes.append(UInt8(ascii: "[")); needsComma = false }
    public mutating func endArray() { bytes.append(UInt8(ascii: "]")); needsComma = true }

    /// Writes `"name":`; the next call writes its value.
    public mutating func key(_ name: String) {
        var name = name
        name.withUTF8 { utf8 in
            // `,"name":` in one append when the name needs no escape (keys are literals).
            if utf8.count <= 60, Self.isPlain(utf8) {
                let comma = needsComma
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { buffer in
                    var i = 0
                    if comma { buffer[0] = UInt8(ascii: ","); i = 1 }
                    buffer[i] = UInt8(ascii: "\"")
                    if let name = utf8.baseAddress { (buffer.baseAddress! + i + 1).update(from: name, count: utf8.count) }
                    i += 1 + utf8.count
                    buffer[i] = UInt8(ascii: "\"")
                    buffer[i + 1] = UInt8(ascii: ":")
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<(i + 2)]))
                }
            } else {
                separate()
                bytes.append(UInt8(ascii: "\""))
                appendEscaped(utf8)
                bytes.append(UInt8(ascii: "\""))
                bytes.append(UInt8(ascii: ":"))
            }
        }
        needsComma = false
    }

    public mutating func string(_ s: String) { separate(); appendQuoted(s) }
    public mutating func int(_ v: Int64) { separate(); appendInteger(v) }
    public mutating func int(_ v: Int) { int(Int64(v)) }
    public mutating func bool(_ v: Bool) { separate(); bytes.append(contentsOf: (v ? "true" : "false").utf8) }
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }

    /// Shortest representation that reads back to the same Double; non-finite values (which the
    /// decoders never produce) are written as null since JSON has no NaN.
    public mutating func double(_ v: Double) {
        separate()
        guard v.isFinite else { bytes.append(contentsOf: "null".utf8); return }
        if abs(v) < 1e15, v == Double(Int64(v)) {
            appendInteger(Int64(v))
        } else if !appendShortDecimal(v) {
            bytes.append(contentsOf: v.description.utf8)
        }
    }

    private mutating func appendInteger(_ v: Int64) {
        appendFixed(v.magnitude, fractionDigits: 0, negative: v < 0)
    }

    private static let powersOfTen: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8]

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
            let p = Self.powersOfTen[k]
            let scaled = magnitude * p
            guard scaled < 4.0e15 else { return false }
            let n = scaled.rounded(.towardZero)
            guard n == scaled else { continue }
            guard n / p == magnitude else { return false }
            let whole = UInt64(n)
            let shorter = Self.powersOfTen[k - 1]
            if Double(whole / 10) / shorter == magnitude || Double(whole / 10 + 1) / shorter == magnitude { return false }
            appendFixed(whole, fractionDigits: k, negative: v < 0)
            return true
        }
        return false
    }

    /// `whole / 10^fractionDigits` in fixed notation (an integer for 0), with at least one digit
    /// before the point, written from a stack buffer in one append.
    private mutating func appendFixed(_ whole: UInt64, fractionDigits: Int, negative: Bool) {
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)  // 32 bytes: 20 digits, point, sign
        withUnsafeMutableBytes(of: &digits) { buffer in
            var rest = whole
            var i = buffer.count
            var written = 0
            repeat {
                if written == fractionDigits, fractionDigits > 0 { i -= 1; buffer[i] = UInt8(ascii: ".") }
                i -= 1
                buffer[i] = UInt8(truncatingIfNeeded: rest % 10) &+ 0x30
                rest /= 10
                written += 1
            } while rest != 0 || written <= fractionDigits
            if negative { i -= 1; buffer[i] = UInt8(ascii: "-") }
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[i...]))
        }
    }

    /// No byte of `utf8` needs an escape in a JSON string.
    @inline(__always)
    private static func isPlain(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        for b in utf8 where b < 0x20 || b == 0x22 || b == 0x5C { return false }
        return true
    }

    /// `s` as a JSON string literal, quotes included (the one JSON string escaper of the project).
    public static func quoted(_ s: String) -> String {
        var w = JSONWriter(capacity: s.utf8.count + 2)
        w.string(s)
        return String(decoding: w.bytes, as: UTF8.self)
    }

    /// Embeds already-encoded JSON (trusted: produced by this writer).
    public mutating func raw(_ json: [UInt8]) { separate(); bytes.append(contentsOf: json) }

    public mutating func optional(_ v: String?) { if let v { string(v) } else { null() } }
    public mutating func optional(_ v: Double?) { if let v { double(v) } else { null() } }
    public mutating func optional(_ v: Int64?) { if let v { int(v) } else { null() } }

    private mutating func appendQuoted(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        var s = s
        // Most strings need no escape: copy them in one go (native strings are contiguous UTF-8).
        s.withUTF8 { utf8 in
            if Self.isPlain(utf8) {
                bytes.append(contentsOf: utf8)
            } else {
                appendEscaped(utf8)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>) {
        for b in utf8 {
            switch b {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [0x5C, 0x22])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: bytes.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: bytes.append(b)
            }
        }
    }
}
