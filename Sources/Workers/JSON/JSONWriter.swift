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
        separate()
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    public mutating func string(_ s: String) { separate(); appendQuoted(s) }
    public mutating func int(_ v: Int64) { separate(); bytes.append(contentsOf: String(v).utf8) }
    public mutating func int(_ v: Int) { int(Int64(v)) }
    public mutating func bool(_ v: Bool) { separate(); bytes.append(contentsOf: (v ? "true" : "false").utf8) }
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }

    /// Shortest representation that reads back to the same Double; non-finite values (which the
    /// decoders never produce) are written as null since JSON has no NaN.
    public mutating func double(_ v: Double) {
        separate()
        guard v.isFinite else { bytes.append(contentsOf: "null".utf8); return }
        if abs(v) < 1e15, v == Double(Int64(v)) {
            bytes.append(contentsOf: String(Int64(v)).utf8)
        } else {
            bytes.append(contentsOf: v.description.utf8)
        }
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
            if !utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
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
