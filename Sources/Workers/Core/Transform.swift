/// A pipeline transform: a pure transform from one input record to output records and decode failures.
///
/// ## Contract
/// - Pure: everything a transform uses comes in as arguments (the record, its own configuration
///   stored in the conforming value, the state, and ``TransformContext/now``). No Kafka, sockets,
///   clocks or globals, so the same inputs always give the same outputs.
/// - State is a value: `process` receives the current state `inout` (value in, new value out;
///   Swift's `inout` on a value type is exactly "take the state, return the new state" without a
///   copy). `State` is `Codable` so the runtime can checkpoint it next to the committed offsets,
///   and restore it with `JSONDecoder` after a restart. Stateless transforms use ``NoState``.
/// - Never crashes on data. Tombstones (`value == nil`) and garbage produce either nothing or a
///   ``DecodeFailure`` in ``TransformOutput/failures``.
/// - Writes, never reads back: `process` appends to a ``TransformOutput`` the runtime shares across
///   a batch of inputs, so an output costs no allocation (see ``TransformOutput``).
/// - Duplicates are harmless: delivering the same record twice yields the same outputs (or none the
///   second time), and every ``OutputRecord`` carries a deterministic ``OutputRecord/dedupeKey``.
///
/// ## How the runtime drives a transform
/// `Pipeline`'s `StageService` keeps one state per input partition (restored from the transform's
/// changelog topic when the partition is assigned), calls `process` for each record of the
/// partition in offset order with the record's timestamp as ``TransformContext/now``, produces the
/// outputs with a `dedupe-key` header, sends each failure as a ``DeadLetter``, calls `advance`
/// on a timer with the wall clock, and checkpoints the state with the offset it covers.
/// A chain of transforms is itself a transform: ``Chain`` (built with ``Transform/then(_:)``) feeds every
/// output of the first transform as an input record to the second; its state is both states.
/// When transforms are chosen at run time, ``chain(_:)`` composes `any Transform` values and
/// ``TransformRunner`` holds one with its state (``TransformCatalog`` builds them by name).
public protocol Transform: Sendable {
    /// The transform's checkpointable state.
    associatedtype State: Codable & Sendable & Equatable = NoState

    /// Stable name, used in dead letters and by `pipelinectl run --transform`.
    var name: String { get }

    /// State for a fresh start (no checkpoint).
    var initialState: State { get }

    /// Handles one input record: writes its outputs and failures into `out`, which already
    /// holds other inputs' results (append only; undo a partial result with
    /// ``TransformOutput/mark`` and ``TransformOutput/discard(since:)``).
    func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput)

    /// Lets time pass without a record (closes batching windows). Default: does nothing.
    func advance(state: inout State, context: TransformContext, into out: inout TransformOutput)
}

extension Transform {
    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {}

    /// One input's results on their own (tests, tools).
    public func process(_ record: InputRecord, state: inout State, context: TransformContext) -> TransformOutput {
        var out = TransformOutput()
        process(record, state: &state, context: context, into: &out)
        return out
    }

    /// One `advance`'s results on their own (tests, tools).
    public func advance(state: inout State, context: TransformContext) -> TransformOutput {
        var out = TransformOutput()
        advance(state: &state, context: context, into: &out)
        return out
    }
}

extension Transform where State == NoState {
    public var initialState: NoState { NoState() }
}

/// The state of a stateless transform.
public struct NoState: Codable, Sendable, Hashable {
    public init() {}
}

/// Two transforms in sequence: each output record of `first` becomes an input record of `second`
/// (topic = the output name, same origin partition/offset and timestamp, so dead letters still
/// point at the Kafka record that started it). Failures of both transforms are returned.
public struct Chain<First: Transform, Second: Transform>: Transform {
    public struct State: Codable, Sendable, Equatable {
        public var first: First.State
        public var second: Second.State
    }

    public let first: First
    public let second: Second

    public init(_ first: First, _ second: Second) {
        self.first = first
        self.second = second
    }

    public var name: String { first.name + "," + second.name }
    public var initialState: State { State(first: first.initialState, second: second.initialState) }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        // Room for a typical output up front: one allocation, not a few as the buffer grows.
        var upstream = TransformOutput(reservingCapacity: 1, bytesPerRecord: 512)
        first.process(record, state: &state.first, context: context, into: &upstream)
        forward(upstream, from: record, state: &state, context: context, into: &out)
    }

    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        var upstream = TransformOutput()
        first.advance(state: &state.first, context: context, into: &upstream)
        let origin = RecordOrigin(topic: first.name, partition: -1, offset: -1)
        let trigger = InputRecord(value: nil, timestamp: context.now, origin: origin)
        forward(upstream, from: trigger, state: &state, context: context, into: &out)
        second.advance(state: &state.second, context: context, into: &out)
    }

    private func forward(
        _ upstream: TransformOutput, from record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput
    ) {
        out.failures.append(contentsOf: upstream.failures)
        for e in upstream.entries {
            // The dedupe key travels as a header, as it does when the runtime produces the
            // record; the value is a slice of the first transform's buffer, not a copy.
            var headers = upstream.headers[Int(e.firstHeader)..<Int(e.firstHeader + e.headerCount)].map {
                RecordHeader(name: String(decoding: upstream.slice($0.name) ?? [], as: UTF8.self), value: upstream.bytes($0.value) ?? [])
            }
            headers.append(RecordHeader(name: OutputRecord.dedupeKeyHeader, value: upstream.bytes(e.dedupeKey) ?? []))
            let next = InputRecord(
                key: upstream.bytes(e.key), sharing: upstream.slice(e.value), headers: headers,
                timestamp: record.timestamp,
                origin: RecordOrigin(topic: upstream.outputNames[Int(e.output)], partition: record.origin.partition, offset: record.origin.offset)
            )
            second.process(next, state: &state.second, context: context, into: &out)
        }
    }
}

extension Transform {
    /// `a.then(b)`: the chain that feeds `a`'s outputs into `b`.
    public func then<Next: Transform>(_ next: Next) -> Chain<Self, Next> { Chain(self, next) }
}
