/// Reads what the ingest endpoint needs of a record without decoding it: whether a body is one
/// JSON value, and the entity key among an object's top-level fields. (The stream's decoder
/// validates the record; before this, Foundation's `JSONSerialization` read each record a second
/// and a third time for these two answers.)
public enum TopLevelFields {
    private static let limits = DecodeLimits(maxBytes: Int.max, maxDepth: 512, maxArrayElements: Int.max)

    /// The entity key among an object's top-level fields: the value of the first of `names`
    /// (in that order) that the object has as a non-empty string or an integer, as text.
    /// `.some(nil)`: it has none of them so; `nil`: this reader cannot tell as Foundation would
    /// (not an object, a field held as a fraction or a boolean: the caller reads it the slow way).
    public static func firstScalar(_ names: [String], in bytes: ArraySlice<UInt8>) -> String?? {
        enum Seen { case text(String), unusual }
        let outcome = try? JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) -> String?? in
            guard try s.peek() == UInt8(ascii: "{") else { return nil }
            try s.beginObject()
            var first = true
            var seen: [Int: Seen] = [:]
            while let key = try s.nextKey(&first) {
                guard let rank = Self.rank(of: key, in: names, scanner: s), seen[rank] == nil else {
                    try s.skipValue()
                    continue
                }
                switch try s.peek() {
                case UInt8(ascii: "\""):
                    let text = try s.readString()
                    if !text.isEmpty { seen[rank] = .text(text) }
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    let start = s.pos
                    try s.skipValue()
                    let number = bytes[(bytes.startIndex + start)..<(bytes.startIndex + s.pos)]
                    // Digits only, within Int64 (Foundation prints a larger one as a double).
                    let integer = number.count <= 18 && number.allSatisfy { $0 == UInt8(ascii: "-") || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }
                    seen[rank] = integer ? .text(String(decoding: number, as: UTF8.self)) : .unusual
                case UInt8(ascii: "t"), UInt8(ascii: "f"):
                    try s.skipValue()
                    seen[rank] = .unusual
                default:
                    try s.skipValue()
                }
            }
            for rank in names.indices {
                switch seen[rank] {
                case .text(let text): return .some(text)
                case .unusual: return nil
                case nil: continue
                }
            }
            return .some(nil)
        }
        return outcome ?? nil
    }

    /// Which of `names` the key is (its bytes compared in place: no `String` per key).
    private static func rank(of key: JSONSpan, in names: [String], scanner s: JSONScanner) -> Int? {
        if key.escaped { return (try? s.string(key)).flatMap { names.firstIndex(of: $0) } }
        let length = key.end - key.start
        return s.withSpanStart(key) { start, _ in
            names.firstIndex { name in
                name.utf8.count == length && name.utf8.enumerated().allSatisfy { start.load(fromByteOffset: $0.offset, as: UInt8.self) == $0.element }
            }
        }
    }

    /// Whether `bytes[from...]` is exactly one JSON value, then only whitespace.
    public static func isOneValue(_ bytes: [UInt8], from: Int) -> Bool {
        (try? JSONScanner.withScanner(bytes[from...], limits: limits) { s throws(DecodeFailure) in try s.skipValue() }) != nil
    }
}
