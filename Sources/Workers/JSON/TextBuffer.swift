/// The strings a decoded value keeps, as UTF-8 in one array: the value refers to each by a
/// ``TextBuffer/Slice`` and makes a `String` only when asked for one.
///
/// A decoder starts from a copy of the message (``JSONScanner/messageText()``): a string without
/// escapes is validated where it is and kept as its place in the message, and one with escapes
/// is decoded onto the end. A product's name, description, thumbnail and image URLs cost one
/// allocation and one copy together instead of an allocation and a copy each (and one release
/// instead of eleven when it goes). Nothing is ever removed or overwritten.
struct TextBuffer: Sendable {
    /// Where one string lies in the buffer.
    struct Slice: Sendable, Hashable {
        var start: UInt32
        var count: UInt32
    }

    private var bytes: [UInt8]

    init() { bytes = [] }

    /// A buffer that starts as a copy of `message`.
    init(copying message: UnsafeRawBufferPointer) {
        bytes = Array(message.assumingMemoryBound(to: UInt8.self))
    }

    mutating func append(_ s: String) -> Slice {
        let start = bytes.count
        bytes.append(contentsOf: s.utf8)
        return Slice(start: UInt32(start), count: UInt32(bytes.count - start))
    }

    /// Keeps what `body` appends to the buffer (unescaped text); if `body` throws (the text is
    /// not valid), what it appended is taken back.
    mutating func append(_ body: (inout [UInt8]) throws(DecodeFailure) -> Void) throws(DecodeFailure) -> Slice {
        let start = bytes.count
        do {
            try body(&bytes)
        } catch {
            bytes.removeSubrange(start...)
            throw error
        }
        return Slice(start: UInt32(start), count: UInt32(bytes.count - start))
    }

    func string(_ slice: Slice) -> String {
        bytes.withUnsafeBufferPointer { all in
            // Valid UTF-8 (checked when kept): `String(decoding:)` has nothing to repair.
            String(decoding: UnsafeBufferPointer(rebasing: all[Int(slice.start)..<Int(slice.start + slice.count)]), as: UTF8.self)
        }
    }

    func withUTF8<R>(_ slice: Slice, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try bytes.withUnsafeBufferPointer { all in
            try body(UnsafeBufferPointer(rebasing: all[Int(slice.start)..<Int(slice.start + slice.count)]))
        }
    }

}

enum UTF8Check {
    /// Whether `bytes` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
    /// above U+10FFFF), without making a `String`. ASCII runs go eight bytes at a time.
    static func isValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let n = bytes.count
        var i = 0
        while i < n {
            if i &+ 8 <= n, UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                i &+= 8
                continue
            }
            let b0 = base[i]
            if b0 < 0x80 {
                i &+= 1
                continue
            }
            @inline(__always) func continuation(_ k: Int) -> Bool { base[i &+ k] & 0xC0 == 0x80 }
            switch b0 {
            case 0xC2...0xDF:
                guard i &+ 1 < n, continuation(1) else { return false }
                i &+= 2
            case 0xE0...0xEF:
                guard i &+ 2 < n, continuation(2) else { return false }
                let b1 = base[i &+ 1]
                switch b0 {
                case 0xE0: guard (0xA0...0xBF).contains(b1) else { return false }  // overlong
                case 0xED: guard (0x80...0x9F).contains(b1) else { return false }  // surrogates
                default: guard b1 & 0xC0 == 0x80 else { return false }
                }
                i &+= 3
            case 0xF0...0xF4:
                guard i &+ 3 < n, continuation(2), continuation(3) else { return false }
                let b1 = base[i &+ 1]
                switch b0 {
                case 0xF0: guard (0x90...0xBF).contains(b1) else { return false }  // overlong
                case 0xF4: guard (0x80...0x8F).contains(b1) else { return false }  // above U+10FFFF
                default: guard b1 & 0xC0 == 0x80 else { return false }
                }
                i &+= 4
            default:
                return false  // a continuation byte first, 0xC0/0xC1 (overlong) or 0xF5 and up
            }
        }
        return true
    }
}
