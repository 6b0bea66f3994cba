#if canImport(Glibc)
import Glibc
#endif
/// Reads what the ingest endpoint needs of a record without decoding it: whether a body is one
/// JSON value, and the entity key among an object's top-level fields. (The stream's decoder
/// validates the record; before this, Foundation's `JSONSerialization` read each record a second
/// and a third time for these two answers.)
public enum TopLevelFields {
    private static let limits = DecodeLimits(maxBytes: Int.max, maxDepth: 512, maxArrayElements: Int.max)

    /// Field names to look for, as their UTF-8 bytes (made once, compared in place per key).
    public struct Names: Sendable {
        let utf8: [[UInt8]]
        public init(_ names: [String]) { utf8 = names.map { Array($0.utf8) } }
    }

    /// The entity key among an object's top-level fields: the value of the first of `names`
    /// (in that order) that the object has as a non-empty string or an integer, as text.
    /// `.some(nil)`: it has none of them so; `nil`: this reader cannot tell as Foundation would
    /// (not an object, a field held as a fraction or a boolean: the caller reads it the slow way).
    public static func firstScalar(_ names: [String], in bytes: ArraySlice<UInt8>) -> String?? {
        firstScalar(Names(names), in: bytes)
    }

    /// ``firstScalar(_:in:)-([String],_)`` with the names made once: nothing is allocated per
    /// key, and the scan stops at the first name's value (nothing can come before it; a
    /// repeated key keeps its first value, as before; the rest of the record is not read, so
    /// its validity is the decoder's to say).
    public static func firstScalar(_ names: Names, in bytes: ArraySlice<UInt8>) -> String?? {
        enum Seen { case text(String), unusual }
        // The first name's value, found before the end: the scan stops there (by a throw).
        var early: String?? = .none
        let stop = DecodeFailure(field: "$", reason: .invalidValue, detail: "stopped at the first name")
        let outcome = try? JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) -> String?? in
            guard try s.peek() == UInt8(ascii: "{") else { return nil }
            try s.beginObject()
            var first = true
            // The lowest-ranked name seen so far and what it held.
            var best: (rank: Int, seen: Seen)?
            while let key = try s.nextKey(&first) {
                guard let rank = Self.rank(of: key, in: names, scanner: s), rank < (best?.rank ?? Int.max) else {
                    try s.skipValue()
                    continue
                }
                switch try s.peek() {
                case UInt8(ascii: "\""):
                    let text = try s.readString()
                    if !text.isEmpty {
                        best = (rank, .text(text))
                        if rank == 0 {
                            early = .some(.some(text))
                            throw stop
                        }
                    }
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    let start = s.pos
                    try s.skipValue()
                    let number = bytes[(bytes.startIndex + start)..<(bytes.startIndex + s.pos)]
                    // Digits only, within Int64 (Foundation prints a larger one as a double).
                    let integer = number.count <= 18 && number.allSatisfy { $0 == UInt8(ascii: "-") || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }
                    best = (rank, integer ? .text(String(decoding: number, as: UTF8.self)) : .unusual)
                    if rank == 0 {
                        early = integer ? .some(.some(String(decoding: number, as: UTF8.self))) : .some(nil)
                        throw stop
                    }
                case UInt8(ascii: "t"), UInt8(ascii: "f"):
                    try s.skipValue()
                    best = (rank, .unusual)
                    if rank == 0 {
                        early = .some(nil)
                        throw stop
                    }
                default:
                    try s.skipValue()
                }
            }
            switch best?.seen {
            case .text(let text): return .some(text)
            case .unusual: return nil
            case nil: return .some(nil)
            }
        }
        // `early`: .some(.some(key)) a key; .some(nil) the slow way (nil to the caller).
        if case .some(let found) = early { return found.map { .some($0) } ?? nil }
        return outcome ?? nil
    }

    /// Which of `names` the key is (its bytes compared in place: no `String` per key).
    private static func rank(of key: JSONSpan, in names: Names, scanner s: JSONScanner) -> Int? {
        if key.escaped { return (try? s.string(key)).flatMap { text in names.utf8.firstIndex { $0 == Array(text.utf8) } } }
        let length = key.end - key.start
        return s.withSpanStart(key) { start, _ in
            for (i, name) in names.utf8.enumerated() where name.count == length {
                if name.withUnsafeBytes({ memcmp($0.baseAddress!, start, length) }) == 0 { return i }
            }
            return nil
        }
    }

    /// Whether `bytes[from...]` is exactly one JSON value, then only whitespace.
    public static func isOneValue(_ bytes: [UInt8], from: Int) -> Bool {
        (try? JSONScanner.withScanner(bytes[from...], limits: limits) { s throws(DecodeFailure) in try s.skipValue() }) != nil
    }
}
