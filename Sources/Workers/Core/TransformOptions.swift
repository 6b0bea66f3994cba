/// A value of a stage's `options:` in the topology file, as the file wrote it: a scalar, a list or
/// a mapping, each with its line (for errors). The topology reader makes these from YAML; each
/// transform reads the keys it declares (``TransformOption``), so adding a transform or an option touches
/// the stage's file and the catalogue, never the topology reader.
public indirect enum OptionValue: Sendable {
    case scalar(String, line: Int?)
    case list([OptionValue], line: Int?)
    case mapping([(key: String, value: OptionValue)], line: Int?)

    public var line: Int? {
        switch self {
        case .scalar(_, let line), .list(_, let line), .mapping(_, let line): line
        }
    }

    /// What the value is, for messages.
    var kind: String {
        switch self {
        case .scalar(let s, _): "'\(s)'"
        case .list: "a list"
        case .mapping: "a mapping"
        }
    }

    public func string() throws(OptionError) -> String {
        guard case .scalar(let s, _) = self, !s.isEmpty else { throw OptionError(self, "expected a non-empty text") }
        return s
    }

    public func int(min: Int = 1, max: Int = Int.max) throws(OptionError) -> Int {
        guard case .scalar(let s, _) = self, let i = Int(s), i >= min, i <= max else {
            let range = max == Int.max ? "of at least \(min)" : "in \(min)...\(max)"
            throw OptionError(self, "expected an integer \(range), found \(kind)")
        }
        return i
    }

    public func double() throws(OptionError) -> Double {
        guard case .scalar(let s, _) = self, let d = Double(s) else { throw OptionError(self, "expected a number, found \(kind)") }
        return d
    }

    public func bool() throws(OptionError) -> Bool {
        guard case .scalar(let s, _) = self, let b = ["true": true, "false": false][s] else {
            throw OptionError(self, "expected true or false, found \(kind)")
        }
        return b
    }

    /// A duration such as `250ms`, `2s`, `5m` or `1h`, in milliseconds.
    public func milliseconds() throws(OptionError) -> Int64 {
        guard case .scalar(let s, _) = self, let ms = parseMilliseconds(s) else {
            throw OptionError(self, "expected a duration such as 250ms, 2s, 5m or 1h, found \(kind)")
        }
        return ms
    }

    /// One name or a list of names.
    public func strings() throws(OptionError) -> [String] {
        switch self {
        case .scalar: return [try string()]
        case .list(let items, _) where !items.isEmpty:
            var out: [String] = []
            for (i, item) in items.enumerated() {
                do { out.append(try item.string()) } catch { throw error.inside("[\(i)]") }
            }
            return out
        default: throw OptionError(self, "expected a list of names")
        }
    }

    /// A list's items (each read by `item`, its errors placed under `[i]`).
    public func list<T>(_ what: String, _ item: (OptionValue) throws(OptionError) -> T) throws(OptionError) -> [T] {
        guard case .list(let items, _) = self else { throw OptionError(self, "expected a list of \(what)") }
        var out: [T] = []
        for (i, value) in items.enumerated() {
            do { out.append(try item(value)) } catch { throw error.inside("[\(i)]") }
        }
        return out
    }

    /// A mapping's entries, every key one of `allowed` (each value read by `entry`, its errors placed under `.key`).
    public func mapping(allowed: [String], _ entry: (String, OptionValue) throws(OptionError) -> Void) throws(OptionError) {
        guard case .mapping(let entries, _) = self else { throw OptionError(self, "expected a mapping (key: value)") }
        for (key, value) in entries {
            guard allowed.contains(key) else {
                throw OptionError(value, "unknown key; expected one of: \(allowed.joined(separator: ", "))").inside(".\(key)")
            }
            do { try entry(key, value) } catch { throw error.inside(".\(key)") }
        }
    }
}

/// What is wrong with an option value: where inside the option (`[1].width`), on which line, and what.
public struct OptionError: Error, Sendable, Equatable {
    /// The place inside the option's value, e.g. `[1].fit` (empty: the value itself).
    public var path: String
    public var line: Int?
    public var message: String

    public init(_ value: OptionValue, _ message: String) {
        self.path = ""
        self.line = value.line
        self.message = message
    }

    /// The same error, one level further out (`[2]` or `.key` before its path).
    public func inside(_ step: String) -> OptionError {
        var e = self
        e.path = step + e.path
        return e
    }
}

/// An option key a transform takes, and how its value goes into the catalogue's options.
public struct TransformOption: Sendable {
    public let key: String
    public let apply: @Sendable (OptionValue, inout TransformCatalog.Options) throws(OptionError) -> Void

    public init(_ key: String, _ apply: @escaping @Sendable (OptionValue, inout TransformCatalog.Options) throws(OptionError) -> Void) {
        self.key = key
        self.apply = apply
    }

    /// `utc-offset-hours`: the zone of the upstream's zone-less dates, for every transform that reads them.
    public static let utcOffset = TransformOption("utc-offset-hours") { value, options throws(OptionError) in
        options.utcOffsetSeconds = try value.int(min: -12, max: 14) * 3600
    }
}

/// `250ms`, `2s`, `5m`, `1h` (a bare number is seconds), in milliseconds; nil if it is not one.
public func parseMilliseconds(_ text: String) -> Int64? {
    var t = Substring(text)
    while t.first == " " { t = t.dropFirst() }
    while t.last == " " { t = t.dropLast() }
    let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
    for (suffix, millis) in units where t.hasSuffix(suffix) {
        guard let n = Int64(t.dropLast(suffix.count)), n >= 0 else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: millis)
        return overflow ? nil : product
    }
    guard let n = Int64(t), n >= 0 else { return nil }
    let (product, overflow) = n.multipliedReportingOverflow(by: 1000)
    return overflow ? nil : product
}
