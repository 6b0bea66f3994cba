/// What transforms write their results into: output records and failures, in order.
///
/// The runtime passes one `TransformOutput` for a whole stretch of input (a consumed batch of one
/// partition) to every ``Transform/process(_:state:context:into:)`` call, and produces from it once
/// the stretch is done. Records are written back to back into one byte buffer (keys, values,
/// header names and values, dedupe keys) with a fixed-size entry each, so an output costs no
/// allocation of its own: a transform writes a value with ``JSONWriter`` and its dedupe key with
/// ``DedupeKeyWriter`` straight into the buffer (``append(output:key:dedupeKey:value:)``), and the
/// runtime hands the buffer to the producer without copying it. Before, each output was an
/// ``OutputRecord`` in an array: its value array, its dedupe key string and the array itself
/// were three allocations per output, and each was copied once more into the producer's batch.
///
/// ``records`` reads the outputs back as ``OutputRecord`` values (tests, tools, the JSON-lines
/// runner); ``append(_:)`` writes one. A transform that fails part way through an input undoes its
/// partial outputs with ``mark`` and ``discard(since:)``: the records of earlier inputs in the
/// same buffer are not its to touch.
public struct TransformOutput: Sendable {
    /// Where a piece of a record lies in ``bytes``; `start` -1 for "none" (a null key, a tombstone).
    package struct Span: Sendable, Equatable {
        package var start: Int
        package var count: Int
        package static let none = Span(start: -1, count: 0)
        package init(start: Int, count: Int) {
            self.start = start
            self.count = count
        }
        package var isNone: Bool { start < 0 }
    }

    package struct Entry: Sendable {
        /// Index into ``outputNames``.
        package var output: Int32
        /// The record's headers: `headers[firstHeader ..< firstHeader + headerCount]`.
        package var firstHeader: Int32
        package var headerCount: Int32
        package var key: Span
        package var value: Span
        package var dedupeKey: Span
    }

    package struct Header: Sendable {
        package var name: Span
        package var value: Span
    }

    /// The written bytes (``byteCount`` of them), then room: a value, a key or a dedupe key is
    /// written in place after the last one (the room is zeros added ahead of the writing, see
    /// `ensureRoom`), not on the stack first and appended.
    package private(set) var bytes: [UInt8] = []
    private var used = 0
    package private(set) var entries: [Entry] = []
    package private(set) var headers: [Header] = []
    /// The logical output names of the records, each once, in order of first use (a transform has a few).
    package private(set) var outputNames: [String] = []
    /// By output index, whether that output's dedupe keys are written; empty (no allocation: a
    /// chain makes an output per input record) while ``outputsIdentifiedByContent`` is.
    private var writesDedupeKey: [Bool] = []
    /// Logical outputs whose topics identify records by their content (`dedupe-key: content`):
    /// the runtime sends no dedupe key for them, so none is written (a transform's `dedupeKey`
    /// closure is not called, and ``OutputRecord/dedupeKey`` reads back empty). Set by the runtime.
    package var outputsIdentifiedByContent: Set<String> = [] {
        didSet {
            writesDedupeKey = outputsIdentifiedByContent.isEmpty ? [] : outputNames.map { !outputsIdentifiedByContent.contains($0) }
        }
    }

    @inline(__always)
    private func writesDedupeKey(_ output: Int32) -> Bool { writesDedupeKey.isEmpty || writesDedupeKey[Int(output)] }
    /// Inputs that could not be used. The runtime sends each one to the dead-letter topic
    /// together with the origin of the input record it was processing.
    public var failures: [DecodeFailure] = []

    public init() {}

    /// Room for `records` records of about `bytesPerRecord` bytes each (and some slack: a value
    /// is written with room ahead of it, and a buffer that grows copies everything in it).
    public init(reservingCapacity records: Int, bytesPerRecord: Int = 256) {
        entries.reserveCapacity(records)
        bytes.reserveCapacity(records * bytesPerRecord + records * bytesPerRecord / 8 + 1024)
    }

    public init(records: [OutputRecord] = [], failures: [DecodeFailure] = []) {
        for r in records { append(r) }
        self.failures = failures
    }

    public static let empty = TransformOutput()

    /// Number of records written.
    public var count: Int { entries.count }

    /// Bytes written (keys, values, headers, dedupe keys).
    public var byteCount: Int { used }

    /// Takes the buffer, leaving no records behind (their spans would point at nothing; the
    /// failures stay): the runtime moves it into the producer's batch after reading the entries.
    package mutating func takeBytes() -> [UInt8] {
        entries = []
        headers = []
        outputNames = []
        writesDedupeKey = []
        bytes.removeLast(bytes.count &- used)
        used = 0
        return take()
    }

    /// The records, read back (one ``OutputRecord`` each: for tests and tools, not the hot path).
    public var records: [OutputRecord] { entries.indices.map(record(at:)) }

    public func record(at index: Int) -> OutputRecord {
        let e = entries[index]
        let headerRange = Int(e.firstHeader)..<Int(e.firstHeader + e.headerCount)
        return OutputRecord(
            output: outputNames[Int(e.output)], key: bytes(e.key), value: bytes(e.value),
            headers: headers[headerRange].map { RecordHeader(name: String(decoding: bytes($0.name) ?? [], as: UTF8.self), value: bytes($0.value) ?? []) },
            dedupeKey: String(decoding: slice(e.dedupeKey) ?? [], as: UTF8.self))
    }

    /// The bytes of a span (nil for none).
    package func bytes(_ span: Span) -> [UInt8]? {
        slice(span).map(Array.init)
    }

    /// The bytes of a span as a slice of the buffer (nil for none), without a copy.
    package func slice(_ span: Span) -> ArraySlice<UInt8>? {
        span.isNone ? nil : bytes[span.start..<span.start + span.count]
    }

    // MARK: Writing

    /// Writes one record.
    public mutating func append(_ record: OutputRecord) {
        let output = outputIndex(record.output)
        let key = write(record.key), value = write(record.value)
        let firstHeader = Int32(headers.count)
        for h in record.headers { headers.append(Header(name: write(h.name), value: write(h.value))) }
        let dedupeKey = writesDedupeKey(output) ? write(record.dedupeKey) : .none
        entries.append(Entry(
            output: output, firstHeader: firstHeader, headerCount: Int32(record.headers.count), key: key, value: value,
            dedupeKey: dedupeKey))
    }

    public mutating func append(contentsOf records: [OutputRecord]) {
        for r in records { append(r) }
    }

    /// Appends another output's records and failures.
    public mutating func append(contentsOf other: TransformOutput) {
        for i in other.entries.indices { append(other.record(at: i)) }
        failures.append(contentsOf: other.failures)
    }

    /// Records a failure (the runtime dead-letters the input with it).
    public mutating func fail(_ failure: DecodeFailure) {
        failures.append(failure)
    }

    /// Writes a record without building it first: `value` writes the JSON value into the
    /// buffer and `dedupeKey` the key's pieces (see ``DedupeKeyWriter``). The hot path's way.
    public mutating func append(
        output: String, key: [UInt8]?, dedupeKey: (inout DedupeKeyWriter) -> Void, value: (inout JSONWriter) -> Void
    ) {
        let outputIndex = outputIndex(output)
        let key = write(key)
        let valueStart = used
        // Room for what a writer writes in one piece (a whole tick) without its stack path.
        ensureRoom(JSONWriter.largestRoomInPlace)
        var writer = JSONWriter(continuing: take(), count: used)
        value(&writer)
        (bytes, used) = (consume writer).finishKeepingRoom()
        let value = Span(start: valueStart, count: used &- valueStart)
        var dedupe = Span.none
        if writesDedupeKey(outputIndex) {
            let dedupeStart = used
            ensureRoom(DedupeKeyWriter.usualRoom)
            used = DedupeKeyWriter.write(dedupeKey, into: &bytes, at: used)
            dedupe = Span(start: dedupeStart, count: used &- dedupeStart)
        }
        entries.append(Entry(
            output: outputIndex, firstHeader: Int32(headers.count), headerCount: 0, key: key, value: value,
            dedupeKey: dedupe))
    }

    /// Where the output stands: what ``discard(since:)`` goes back to.
    public struct Mark: Sendable {
        fileprivate var entries: Int, headers: Int, bytes: Int, failures: Int
    }

    public var mark: Mark { Mark(entries: entries.count, headers: headers.count, bytes: used, failures: failures.count) }

    /// Removes what was written after `mark` (a transform that fails part way through an input).
    public mutating func discard(since mark: Mark) {
        entries.removeSubrange(mark.entries...)
        headers.removeSubrange(mark.headers...)
        used = mark.bytes
        failures.removeSubrange(mark.failures...)
    }

    private mutating func take() -> [UInt8] {
        var taken: [UInt8] = []
        swap(&taken, &bytes)
        return taken
    }

    private mutating func outputIndex(_ output: String) -> Int32 {
        // Records come in runs of one output: the last one first.
        if let last = outputNames.indices.last, outputNames[last] == output { return Int32(last) }
        if let i = outputNames.firstIndex(of: output) { return Int32(i) }
        outputNames.append(output)
        if !outputsIdentifiedByContent.isEmpty { writesDedupeKey.append(!outputsIdentifiedByContent.contains(output)) }
        return Int32(outputNames.count - 1)
    }

    private mutating func write(_ source: [UInt8]?) -> Span {
        guard let source else { return .none }
        // Through a buffer pointer: the array as an argument is retained before the call and
        // released in it, per output key.
        return source.withUnsafeBufferPointer { write($0) }
    }

    private mutating func write(_ text: String) -> Span {
        var text = text
        return text.withUTF8 { write($0) }
    }

    private mutating func write(_ source: UnsafeBufferPointer<UInt8>) -> Span {
        let start = used
        let n = source.count
        ensureRoom(n)
        if let from = source.baseAddress {
            bytes.withUnsafeMutableBufferPointer { to in
                ShortBytes.copy(from: UnsafeRawPointer(from), to: UnsafeMutableRawPointer(to.baseAddress! + start), count: n)
            }
        }
        used = start &+ n
        return Span(start: start, count: n)
    }

    /// At least `n` bytes of room after the written ones: the rest of the capacity
    /// ``init(reservingCapacity:bytesPerRecord:)`` reserved, zeroed at once (no reallocation), or
    /// once that is used up as much room as the buffer holds (it doubles, as an array does).
    @inline(__always)
    private mutating func ensureRoom(_ n: Int) {
        if bytes.count &- used < n { ZeroRoom.add(atLeast: max(n, bytes.capacity &- bytes.count, bytes.count), to: &bytes) }
    }
}

extension TransformOutput: Hashable {
    public static func == (a: TransformOutput, b: TransformOutput) -> Bool {
        a.records == b.records && a.failures == b.failures
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(records)
        hasher.combine(failures)
    }
}

extension TransformOutput: CustomStringConvertible {
    public var description: String { "TransformOutput(records: \(records), failures: \(failures))" }
}
