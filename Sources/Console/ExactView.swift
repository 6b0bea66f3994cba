/// How the console shows a key or a value it did not write: the exact bytes, and for JSON a
/// laid-out view that only adds or removes whitespace between tokens, so that every character
/// that means something (a duplicate key, `2874000.00000000`, the keys' order, an escape) is
/// shown as it was sent.
enum ExactView {
    /// `bytes` indented two spaces per level, tokens copied as they are; nil when the bytes are
    /// not one JSON object or array (unbalanced brackets, an unterminated string, text after the
    /// end), which are then shown only as they are.
    static func laidOut(_ bytes: [UInt8]) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + bytes.count / 4)
        var depth = 0
        var i = 0
        var started = false
        /// After an opening bracket: the newline is written before the next token, so that an
        /// empty `{}` or `[]` stays on one line.
        var pendingOpen = false
        func newline(_ level: Int) {
            out.append(UInt8(ascii: "\n"))
            out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * level))
        }
        while i < bytes.count {
            let b = bytes[i]
            switch b {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                i += 1
                continue
            default:
                break
            }
            if started, depth == 0 { return nil }  // something after the end
            if !started {
                guard b == UInt8(ascii: "{") || b == UInt8(ascii: "[") else { return nil }
                started = true
            }
            let closing = b == UInt8(ascii: "}") || b == UInt8(ascii: "]")
            if pendingOpen {
                pendingOpen = false
                if !closing { newline(depth) }
            } else if closing {
                newline(depth - 1)
            }
            switch b {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                out.append(b)
                depth += 1
                pendingOpen = true
                i += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                guard depth > 0 else { return nil }
                depth -= 1
                out.append(b)
                i += 1
            case UInt8(ascii: ","):
                guard depth > 0 else { return nil }
                out.append(b)
                newline(depth)
                i += 1
            case UInt8(ascii: ":"):
                out.append(contentsOf: [b, UInt8(ascii: " ")])
                i += 1
            case UInt8(ascii: "\""):
                // A string, escapes and all, as it is.
                let start = i
                i += 1
                while i < bytes.count, bytes[i] != UInt8(ascii: "\"") { i += bytes[i] == UInt8(ascii: "\\") ? 2 : 1 }
                guard i < bytes.count else { return nil }
                i += 1
                out.append(contentsOf: bytes[start..<i])
            default:
                // A number, true, false, null (or anything else): up to the next structural byte.
                let start = i
                while i < bytes.count, !Self.ends(bytes[i]) { i += 1 }
                out.append(contentsOf: bytes[start..<i])
            }
        }
        guard started, depth == 0 else { return nil }
        return String(validating: out, as: UTF8.self)
    }

    private static func ends(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: ","), UInt8(ascii: ":"), UInt8(ascii: "{"), UInt8(ascii: "}"), UInt8(ascii: "["), UInt8(ascii: "]"),
            UInt8(ascii: "\""), UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
            return true
        default:
            return false
        }
    }

    /// Offset, hex and printable ASCII, 16 bytes a line (for bytes that are not UTF-8), as
    /// `hexdump -C` writes them.
    static func hexDump(_ bytes: [UInt8], limit: Int = 64 << 10) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for line in stride(from: 0, to: min(bytes.count, limit), by: 16) {
            let chunk = Array(bytes[line..<min(line + 16, bytes.count)])
            for shift in stride(from: 28, through: 0, by: -4) { out.append(digits[(line >> shift) & 0xF]) }
            out.append(contentsOf: "  ".utf8)
            for j in 0..<16 {
                if j < chunk.count {
                    out.append(digits[Int(chunk[j] >> 4)])
                    out.append(digits[Int(chunk[j] & 0xF)])
                } else {
                    out.append(contentsOf: "  ".utf8)
                }
                out.append(UInt8(ascii: " "))
                if j == 7 { out.append(UInt8(ascii: " ")) }
            }
            out.append(UInt8(ascii: "|"))
            for b in chunk { out.append((0x20..<0x7f).contains(b) ? b : UInt8(ascii: ".")) }
            out.append(contentsOf: "|\n".utf8)
        }
        if bytes.count > limit { out.append(contentsOf: "… \(bytes.count - limit) more bytes\n".utf8) }
        return String(decoding: out, as: UTF8.self)
    }
}
