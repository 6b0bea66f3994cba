/// Where a record came from. The runtime fills it in; transforms copy it through so a dead letter
/// can always name the exact input that failed.
public struct RecordOrigin: Sendable, Hashable, Codable {
    /// Kafka topic the record was read from (or, inside a chain, the logical output name of
    /// the previous transform).
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    @inlinable
    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// One Kafka header. Kafka allows repeated names, so headers are an ordered list, not a dictionary.
public struct RecordHeader: Sendable, Hashable, Codable {
    public var name: String
    public var value: [UInt8]

    public init(name: String, value: [UInt8]) {
        self.name = name
        self.value = value
    }

    public init(_ name: String, _ value: String) {
        self.init(name: name, value: Array(value.utf8))
    }
}

extension [RecordHeader] {
    /// The value of the last header called `name` (Kafka's convention when a header repeats).
    public func value(named name: String) -> [UInt8]? {
        last(where: { $0.name == name })?.value
    }

    /// The value of the last header called `name` as UTF-8 text, or nil if absent or not UTF-8.
    public func string(named name: String) -> String? {
        value(named: name).flatMap { String(validating: $0, as: UTF8.self) }
    }
}

/// A record as the runtime hands it to a transform.
public struct InputRecord: Sendable, Hashable {
    public var key: [UInt8]?
    /// The payload; nil is a tombstone, a legal Kafka record that every transform must handle.
    /// A slice: the runtime hands out the values of a consumed batch as slices of one buffer
    /// (one allocation per batch, not one per record); `Array(value)` makes a copy to keep.
    @inlinable
    public var value: ArraySlice<UInt8>? {
        get { hasValue ? bytes : nil }
        set {
            hasValue = newValue != nil
            bytes = newValue ?? []
        }
    }
    // Stored as a slice and a flag, not an optional slice: copying an `ArraySlice<UInt8>?` went
    // through the standard library's generic value witnesses (about 250 instructions per
    // record on the hot path, where each input is copied a few times); a plain slice is one retain.
    @usableFromInline var bytes: ArraySlice<UInt8>
    @usableFromInline var hasValue: Bool
    public var headers: [RecordHeader]
    /// Record timestamp, epoch milliseconds.
    public var timestamp: Int64
    public var origin: RecordOrigin
    /// The record's topic identifies its records by their content (`dedupe-key: content` in the
    /// topology): it carries no `dedupe-key` header, and its ``identity`` is
    /// ``OutputRecord/contentDedupeKey(key:value:)``. Set by the runtime.
    public var identifiedByContent: Bool

    // Inlinable (here and for the other records): built per record across modules, where a call
    // retains every field into the new value and releases the arguments after.
    @inlinable
    public init(
        key: [UInt8]? = nil, value: [UInt8]?, headers: [RecordHeader] = [], timestamp: Int64,
        origin: RecordOrigin
    ) {
        self.init(key: key, sharing: value.map { $0[...] }, headers: headers, timestamp: timestamp, origin: origin)
    }

    /// A record whose value is a slice of a larger buffer (a consumed batch's), kept without a copy.
    @inlinable
    public init(
        key: [UInt8]? = nil, sharing value: ArraySlice<UInt8>?, headers: [RecordHeader] = [], timestamp: Int64,
        origin: RecordOrigin, identifiedByContent: Bool = false
    ) {
        self.key = key
        self.bytes = value ?? []
        self.hasValue = value != nil
        self.headers = headers
        self.timestamp = timestamp
        self.origin = origin
        self.identifiedByContent = identifiedByContent
    }
}

extension InputRecord {
    /// The record a failure of ``Transform/advance(state:context:)`` is attributed to: no input, origin `(advance)`.
    public static func advance(at now: Int64) -> InputRecord {
        InputRecord(value: nil, timestamp: now, origin: RecordOrigin(topic: "(advance)", partition: -1, offset: -1))
    }
}

/// A record a transform wants produced.
public struct OutputRecord: Sendable, Hashable {
    /// Logical output name (e.g. `prices.candles.1m`); the runtime maps it to a topic.
    public var output: String
    public var key: [UInt8]?
    /// nil produces a tombstone.
    public var value: [UInt8]?
    public var headers: [RecordHeader]
    /// Deterministic identity of this output: the same input delivered twice yields the same
    /// key, so consumers (and the runtime's producer) can drop the duplicate. The runtime
    /// sends it as the `dedupe-key` header, unless the output's topic identifies its records by
    /// their content (``contentDedupeKey(key:value:)``).
    public var dedupeKey: String

    @inlinable
    public init(
        output: String, key: [UInt8]?, value: [UInt8]?, headers: [RecordHeader] = [], dedupeKey: String
    ) {
        self.output = output
        self.key = key
        self.value = value
        self.headers = headers
        self.dedupeKey = dedupeKey
    }

    /// The header that carries ``dedupeKey`` on a produced record.
    public static let dedupeKeyHeader = "dedupe-key"

    /// The dedupe key of a record on a topic declared `dedupe-key: content`, whose records carry
    /// no header: equal key and value make the same record. `content:` and 32 hex digits of
    /// FNV-1a 128 over the key's length (4 bytes, big-endian; `FFFFFFFF` for no key), the key,
    /// the value's length (the same way; `FFFFFFFF` for a tombstone) and the value. Any consumer
    /// computes it from the record alone (docs/guarantees.md, "Dedupe keys").
    public static func contentDedupeKey(key: [UInt8]?, value: ArraySlice<UInt8>?) -> String {
        var hash = FNV1a128()
        hash.add(length: key?.count)
        if let key { hash.add(key) }
        hash.add(length: value?.count)
        if let value { hash.add(value) }
        return "content:" + hash.hex
    }
    /// Set on an output the runtime sent again after a failed delivery (its value: the attempts
    /// that failed before). Later outputs of its partition that were already in flight may have
    /// landed before it; those are sent again after it, with ``resentHeader``.
    public static let retriedHeader = "delivery.retried"
    /// Set on a copy of an output that was delivered, sent again because an earlier output of
    /// its partition was retried after it had landed: the last copy of each output comes in the
    /// order of the inputs.
    public static let resentHeader = "delivery.resent"

    /// Key as UTF-8 text (tests, CLI).
    public var keyString: String? { key.map { String(decoding: $0, as: UTF8.self) } }
    /// Value as UTF-8 text (tests, CLI).
    public var valueString: String? { value.map { String(decoding: $0, as: UTF8.self) } }
}

/// What the runtime passes with each call: time comes in as a value, transforms never read a clock.
public struct TransformContext: Sendable, Hashable {
    /// "Now" in epoch milliseconds: the runtime's event time (for a record, usually its
    /// timestamp; for `advance`, the wall clock it sampled). Tests pass any value.
    public var now: Int64

    public init(now: Int64) { self.now = now }
}
