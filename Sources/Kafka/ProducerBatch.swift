/// Records to produce, written back to back into one byte buffer: keys, values, header names and
/// values of every record, with a fixed-size entry per record that says where its pieces are.
///
/// A worker hands the producer a batch per stretch of input and keeps it until every record is
/// delivered (to retry what failed). As `[ProducerRecord]` that cost several allocations per
/// record (its key, value and header arrays, each header's value) and, once settled, a release
/// per field of every record on another thread; a batch is four arrays, whatever its size, and
/// producing from it reads straight out of its buffer (`rd_kafka_produceva` copies each message
/// into librdkafka's own allocation, as it did before).
public struct ProducerBatch: Sendable {
    /// Where a piece of a record lies in ``bytes``; `start` -1 for "none" (a null key, a tombstone).
    @usableFromInline
    package struct Span: Sendable {
        @usableFromInline package var start: Int
        @usableFromInline package var count: Int
        @usableFromInline package static let none = Span(start: -1, count: 0)
        @usableFromInline package init(start: Int, count: Int) {
            self.start = start
            self.count = count
        }
        @usableFromInline package var isNone: Bool { start < 0 }
    }

    @usableFromInline
    struct Entry: Sendable {
        @usableFromInline var topic: Int32
        /// `Int32.min`: the partitioner chooses.
        @usableFromInline var partition: Int32
        /// `Int64.min`: librdkafka stamps the send time.
        @usableFromInline var timestamp: Int64
        @usableFromInline var key: Span
        @usableFromInline var value: Span
        /// The record's headers: `headers[firstHeader ..< firstHeader + headerCount]`.
        @usableFromInline var firstHeader: Int32
        @usableFromInline var headerCount: Int32
        @usableFromInline init(topic: Int32, partition: Int32, timestamp: Int64, key: Span, value: Span, firstHeader: Int32) {
            self.topic = topic
            self.partition = partition
            self.timestamp = timestamp
            self.key = key
            self.value = value
            self.firstHeader = firstHeader
            self.headerCount = 0
        }
    }

    @usableFromInline
    struct Header: Sendable {
        @usableFromInline var name: Span
        /// `.none`: a header without a value.
        @usableFromInline var value: Span
        @usableFromInline init(name: Span, value: Span) {
            self.name = name
            self.value = value
        }
    }

    @usableFromInline var bytes: [UInt8] = []
    @usableFromInline var entries: [Entry] = []
    @usableFromInline var headers: [Header] = []
    /// The topics of the records, each once, in order of first use (a batch has a few).
    @usableFromInline var topics: [String] = []

    public init() {}

    /// Room for `records` records of about `bytesPerRecord` bytes each.
    public init(reservingCapacity records: Int, bytesPerRecord: Int = 256) {
        entries.reserveCapacity(records)
        headers.reserveCapacity(records)
        bytes.reserveCapacity(records * bytesPerRecord)
    }

    public init(_ records: [ProducerRecord]) {
        self.init()
        // Room for exactly what they hold: the buffer is written once, never grown and copied.
        var byteCount = 0, headerCount = 0
        for r in records {
            byteCount += (r.key?.count ?? 0) + (r.value?.count ?? 0)
            for h in r.headers { byteCount += h.key.utf8.count + (h.value?.count ?? 0) }
            headerCount += r.headers.count
        }
        bytes.reserveCapacity(byteCount)
        entries.reserveCapacity(records.count)
        headers.reserveCapacity(headerCount)
        for record in records { append(record) }
    }

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }

    /// Approximate memory the batch holds (for in-flight byte bounds).
    public var byteCount: Int { bytes.count + entries.count * 64 }

    // MARK: Writing

    @inlinable
    package mutating func topicIndex(_ topic: String) -> Int32 {
        // Outputs come in runs of one topic: the last one first.
        if let last = topics.indices.last, topics[last] == topic { return Int32(last) }
        if let i = topics.firstIndex(of: topic) { return Int32(i) }
        topics.append(topic)
        return Int32(topics.count - 1)
    }

    @inlinable
    mutating func write(_ source: [UInt8]?) -> Span {
        guard let source else { return .none }
        let start = bytes.count
        bytes.append(contentsOf: source)
        return Span(start: start, count: source.count)
    }

    @inlinable
    package mutating func write(_ text: String) -> Span {
        let start = bytes.count
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
        return Span(start: start, count: bytes.count - start)
    }

    /// Starts a record; its headers follow with ``appendHeader(_:value:)`` and ``appendHeader(_:text:)``.
    @inlinable
    public mutating func append(topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8]?, timestamp: Int64?) {
        let topic = topicIndex(topic)
        let key = write(key), value = write(value)
        entries.append(Entry(
            topic: topic, partition: partition ?? Int32.min, timestamp: timestamp ?? Int64.min, key: key, value: value,
            firstHeader: Int32(headers.count)))
    }

    /// Takes `other` as the batch's buffer when it has none yet (no copy), else appends a copy
    /// of it; returns where `other` starts in the buffer (for spans into it).
    package mutating func adopt(_ other: consuming [UInt8]) -> Int {
        if bytes.isEmpty {
            bytes = other
            return 0
        }
        let base = bytes.count
        bytes.append(contentsOf: other)
        return base
    }

    /// Starts a record whose pieces are already in the buffer (see ``adopt(_:)``).
    package mutating func append(topic: Int32, key: Span, value: Span, timestamp: Int64?) {
        entries.append(Entry(
            topic: topic, partition: Int32.min, timestamp: timestamp ?? Int64.min, key: key, value: value,
            firstHeader: Int32(headers.count)))
    }

    /// A header of the record appended last, its name and value already in the buffer.
    package mutating func appendHeader(name: Span, value: Span) {
        headers.append(Header(name: name, value: value))
        entries[entries.count - 1].headerCount += 1
    }

    /// A header of the record appended last.
    @inlinable
    public mutating func appendHeader(_ name: String, value: [UInt8]?) {
        precondition(!entries.isEmpty, "a header belongs to a record: append the record first")
        headers.append(Header(name: write(name), value: write(value)))
        entries[entries.count - 1].headerCount += 1
    }

    /// A header of the record appended last, its value the string's UTF-8 bytes.
    @inlinable
    public mutating func appendHeader(_ name: String, text: String) {
        precondition(!entries.isEmpty, "a header belongs to a record: append the record first")
        headers.append(Header(name: write(name), value: write(text)))
        entries[entries.count - 1].headerCount += 1
    }

    public mutating func append(_ record: ProducerRecord) {
        append(topic: record.topic, partition: record.partition, key: record.key, value: record.value, timestamp: record.timestamp)
        for header in record.headers { appendHeader(header.key, value: header.value) }
    }

    /// Record `index` of `other` (a retry of what failed).
    public mutating func append(_ index: Int, of other: ProducerBatch) {
        append(other[index])
    }

    // MARK: Reading

    @inline(__always)
    private func array(_ span: Span) -> [UInt8]? {
        span.isNone ? nil : Array(bytes[span.start..<(span.start + span.count)])
    }

    /// Record `index` has no headers and no timestamp of its own: runs of such records of one
    /// topic are enqueued with one call into librdkafka (``RDKafkaClient/produceRun``).
    @inline(__always)
    func isPlain(_ index: Int) -> Bool {
        let entry = entries[index]
        return entry.headerCount == 0 && entry.timestamp == Int64.min
    }

    /// The end of the run of plain records of one topic that starts at `start` (`start` itself
    /// when record `start` is not plain).
    func plainRunEnd(from start: Int) -> Int {
        guard isPlain(start) else { return start }
        let topic = entries[start].topic
        var end = start + 1
        while end < entries.count, entries[end].topic == topic, isPlain(end) { end += 1 }
        return end
    }

    /// The topic of record `index`.
    public func topic(_ index: Int) -> String { topics[Int(entries[index].topic)] }

    /// The number this batch gives record `index`'s topic: records of one topic have the same
    /// number, so a loop over the records compares numbers, not names.
    @inline(__always)
    package func topicNumber(of index: Int) -> Int32 { entries[index].topic }

    /// The number of `topic` in this batch (``topicNumber(of:)``), or nil when no record goes to it.
    package func topicNumber(_ topic: String) -> Int32? { topics.firstIndex(of: topic).map { Int32($0) } }

    /// The value of the last header of record `index` called `name` (nil if it has none, or no value).
    public func header(_ name: String, of index: Int) -> [UInt8]? {
        let entry = entries[index]
        var name = name
        // Compared as bytes: a slice's `elementsEqual` with a `String.UTF8View` went through
        // the string's index per byte (about 700 instructions per dead letter settled).
        let found = name.withUTF8 { wanted in
            bytes.withUnsafeBufferPointer { all in
                headers[Int(entry.firstHeader)..<Int(entry.firstHeader + entry.headerCount)].last { h in
                    guard h.name.count == wanted.count else { return false }
                    for i in 0..<wanted.count where all[h.name.start &+ i] != wanted[i] { return false }
                    return true
                }
            }
        }
        return found.flatMap { array($0.value) }
    }

    /// Approximate memory of record `index` (as ``byteCount`` counts it).
    public func size(_ index: Int) -> Int {
        let entry = entries[index]
        var n = entry.key.count + entry.value.count + 64  // a missing piece counts 0
        for h in headers[Int(entry.firstHeader)..<Int(entry.firstHeader + entry.headerCount)] { n += h.name.count + h.value.count }
        return n
    }

    /// Record `index` as a ``ProducerRecord`` (copies its bytes).
    public subscript(index: Int) -> ProducerRecord {
        let entry = entries[index]
        return ProducerRecord(
            topic: topics[Int(entry.topic)], partition: entry.partition == Int32.min ? nil : entry.partition,
            key: array(entry.key), value: array(entry.value),
            headers: headers[Int(entry.firstHeader)..<Int(entry.firstHeader + entry.headerCount)].map {
                KafkaHeader(key: String(decoding: bytes[$0.name.start..<($0.name.start + $0.name.count)], as: UTF8.self), value: array($0.value))
            },
            timestamp: entry.timestamp == Int64.min ? nil : entry.timestamp)
    }

    /// Every record as a ``ProducerRecord`` (tests, cold paths).
    public var records: [ProducerRecord] { (0..<count).map { self[$0] } }
}
