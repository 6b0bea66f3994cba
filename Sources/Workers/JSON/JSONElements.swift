/// The exact bytes of the elements of one JSON array inside a document, found by a path of
/// object keys: what a list-page reader needs to forward each listed item as the upstream wrote
/// it (numbers, key order and escapes untouched), without building a tree.
public enum JSONElements {
    /// Byte ranges of the elements of the array reached by following `path` (object member
    /// names from the top; empty: the document itself is the array). nil when a member on the
    /// path is missing or the value there is not an array; throws when the document is not
    /// valid JSON (the whole document is checked).
    public static func ranges(
        in bytes: [UInt8], at path: [String], limits: DecodeLimits = DecodeLimits(maxBytes: Int.max, maxDepth: 512, maxArrayElements: Int.max)
    ) throws(DecodeFailure) -> [Range<Int>]? {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) -> [Range<Int>]? in
            let found = try find(&s, path[...])
            return found
        }
    }

    private static func find(_ s: inout JSONScanner, _ path: ArraySlice<String>) throws(DecodeFailure) -> [Range<Int>]? {
        guard let name = path.first else {
            guard try s.peek() == UInt8(ascii: "[") else {
                try s.skipValue()
                return nil
            }
            var ranges: [Range<Int>] = []
            try s.beginArray()
            var first = true
            while try s.nextElement(&first) {
                let start = s.pos
                try s.skipValue()
                ranges.append(start..<s.pos)
            }
            return ranges
        }
        guard try s.peek() == UInt8(ascii: "{") else {
            try s.skipValue()
            return nil
        }
        try s.beginObject()
        var first = true
        var result: [Range<Int>]?
        while let key = try s.nextKey(&first) {
            if result == nil, try s.string(key) == name {
                result = try find(&s, path.dropFirst())
            } else {
                try s.skipValue()
            }
        }
        return result
    }
}
