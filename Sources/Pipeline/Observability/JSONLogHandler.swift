import Foundation
import Logging
import Workers
import Kafka

/// swift-log handler writing one JSON object per line to standard error
/// (`{"ts":…,"level":…,"label":…,"message":…,"stage":…,…}`), for log shippers.
/// Metadata values are rendered as strings; secrets never reach it (`Secret` prints redacted).
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public let label: String

    public init(label: String) { self.label = label }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields: [(String, String)] = [
            ("ts", Self.timestamp()), ("level", event.level.rawValue), ("label", label), ("message", "\(event.message)"),
        ]
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for key in merged.keys.sorted() { fields.append((key, "\(merged[key]!)")) }
        var line = "{"
        for (i, (k, v)) in fields.enumerated() {
            if i > 0 { line += "," }
            line += JSONWriter.quoted(k) + ":" + JSONWriter.quoted(v)
        }
        line += "}\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    static func timestamp() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date())
    }
}
