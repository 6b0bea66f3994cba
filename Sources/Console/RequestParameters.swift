import Foundation
import Operations

/// A request parameter the console cannot take: the page answers 400 with the reason, which
/// names the parameter.
struct BadParameter: Error, Sendable, Hashable, CustomStringConvertible {
    var name: String
    var reason: String

    var description: String { "\(name): \(reason)" }
}

/// The parameters of a query string or an `application/x-www-form-urlencoded` body, read
/// strictly: a value that is not percent-encoded UTF-8, or a name given twice, is refused with
/// its name rather than dropped (a dropped dead-letter filter selects everything).
enum RequestParameters {
    static func decode(_ text: some StringProtocol) throws(BadParameter) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = unescape(parts[0]) else {
                throw BadParameter(name: "a parameter name", reason: "'\(parts[0])' is not percent-encoded UTF-8")
            }
            let raw = parts.count == 2 ? parts[1] : ""
            guard let value = unescape(raw) else {
                throw BadParameter(name: name, reason: "'\(raw)' is not percent-encoded UTF-8")
            }
            guard out[name] == nil else { throw BadParameter(name: name, reason: "given twice; give it once") }
            out[name] = value
        }
        return out
    }

    /// A path parameter as the router hands it (still percent-encoded), decoded: `%XX` as a
    /// byte, `+` as itself.
    static func path(_ text: String, name: String) throws(BadParameter) -> String {
        guard let decoded = unescape(text, plusIsSpace: false) else {
            throw BadParameter(name: name, reason: "'\(text)' is not percent-encoded UTF-8")
        }
        return decoded
    }

    /// `+` as a space (in a query or form) and `%XX` as a byte; nil for a `%` not followed by
    /// two hex digits or bytes that are not UTF-8.
    static func unescape(_ text: some StringProtocol, plusIsSpace: Bool = true) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var it = text.utf8.makeIterator()
        while let b = it.next() {
            switch b {
            case UInt8(ascii: "+") where plusIsSpace: bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let h = it.next().flatMap(hex), let l = it.next().flatMap(hex) else { return nil }
                bytes.append(h << 4 | l)
            default: bytes.append(b)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// `text` as a whole number in `range`; the error names the parameter and the range.
    static func number(_ text: String, name: String, _ range: ClosedRange<Int64>, what: String) throws(BadParameter) -> Int64 {
        do { return try NumberBounds.parse(text, range, what: what) } catch { throw BadParameter(name: name, reason: error.description) }
    }

    /// A time as the console's forms take it: epoch ms or ISO-8601, from 1970 to 9999
    /// (a negative time would reach the broker as ListOffsets' latest or earliest).
    static func time(_ text: String, name: String) throws(BadParameter) -> Int64 {
        let range = NumberBounds.epochMillis
        if let ms = Int64(text) {
            guard range.contains(ms) else { throw BadParameter(name: name, reason: "'\(text)' is not a time from 1970-01-01 to 9999-12-31 (epoch ms \(range.lowerBound) to \(range.upperBound))") }
            return ms
        }
        guard let date = ISO8601DateFormatter().date(from: text) else {
            throw BadParameter(name: name, reason: "'\(text)' is not a time (ISO-8601 such as 2026-11-25T10:00:00Z, or epoch ms)")
        }
        guard let ms = NumberBounds.epochMillis(date) else { throw BadParameter(name: name, reason: "'\(text)' is not a time from 1970-01-01 to 9999-12-31") }
        return ms
    }
}
