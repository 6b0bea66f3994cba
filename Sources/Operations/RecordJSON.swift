import Foundation
import Workers
import Kafka

/// Records as JSON lines: `{"topic","partition","offset","timestamp","key","value","headers"}`,
/// the envelope `pipelinectl run` and `pipelinectl produce` read back. A value that is valid
/// JSON is embedded as JSON, anything else as a string; a tombstone is `null`; header values
/// are strings (null for a header without a value).
public enum RecordJSON {
    public static func line(_ r: ConsumerRecord) -> String {
        var out = "{\"topic\":\(quote(r.topic)),\"partition\":\(r.partition),\"offset\":\(r.offset),"
        out += "\"timestamp\":\(r.timestamp.map(String.init) ?? "null"),"
        out += "\"key\":\(r.key.map { quote(String(decoding: $0, as: UTF8.self)) } ?? "null"),"
        out += "\"value\":\(value(r.value)),\"headers\":{"
        out += r.headers.map { "\(quote($0.key)):\($0.value.map { quote(String(decoding: $0, as: UTF8.self)) } ?? "null")" }.joined(separator: ",")
        out += "}}"
        return out
    }

    static func value(_ bytes: [UInt8]?) -> String {
        guard let bytes else { return "null" }
        if isJSON(bytes), !bytes.contains(0x0A), !bytes.contains(0x0D) { return String(decoding: bytes, as: UTF8.self) }
        return quote(String(decoding: bytes, as: UTF8.self))
    }

    static func isJSON(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.first(where: { $0 != 0x20 && $0 != 0x09 }) else { return false }
        // Only objects and arrays are embedded: a bare number or string stays text, so the
        // value's bytes come back unchanged when the line is read again.
        guard first == UInt8(ascii: "{") || first == UInt8(ascii: "[") else { return false }
        return (try? JSONSerialization.jsonObject(with: Data(bytes), options: [])) != nil
    }

    public static func quote(_ s: String) -> String { JSONWriter.quoted(s) }
}
