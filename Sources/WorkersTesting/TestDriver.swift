import Workers

/// Runs a transform (or chain) the way the runtime would, without a broker: assigns records to
/// partitions and offsets, keeps the state between records, can redeliver records (as
/// at-least-once delivery does), and collects outputs and dead letters. Use it in your own tests:
///
/// ```swift
/// var driver = TestDriver(PriceDecodeTransform().then(CandleTransform()), partitions: 3)
/// driver.send(key: "KRW-BTC", value: #"{"code":"KRW-BTC",...}"#, timestamp: 1_700_000_000_000)
/// driver.redeliver(from: 0)                       // everything again
/// #expect(driver.outputs(named: "prices.candles.1m").count == 1)
/// ```
///
/// Each call uses the record's timestamp as ``TransformContext/now``.
public struct TestDriver<S: Transform> {
    public let stage: S
    public private(set) var state: S.State
    /// Every output produced so far, in order.
    public private(set) var outputs: [OutputRecord] = []
    /// Every failure produced so far, as the dead letter the Kafka runtime would send.
    public private(set) var deadLetters: [DeadLetter] = []
    /// Every record delivered so far (redeliveries included), in order.
    public private(set) var delivered: [InputRecord] = []
    public let topic: String
    public let partitions: Int32
    private var nextOffset: [Int32: Int64] = [:]

    public init(_ stage: S, topic: String = "input", partitions: Int32 = 3) {
        self.stage = stage
        self.state = stage.initialState
        self.topic = topic
        self.partitions = max(1, partitions)
    }

    /// Delivers a new record. Without `partition`, keyed records go to a partition chosen by a
    /// stable hash of the key (like Kafka's partitioner, though not the same function) and
    /// unkeyed ones to partition 0.
    @discardableResult
    public mutating func send(
        key: [UInt8]?, value: [UInt8]?, headers: [RecordHeader] = [], timestamp: Int64, partition: Int32? = nil
    ) -> TransformOutput {
        let p = partition ?? key.map { k in Int32(truncatingIfNeeded: fnv1a(k) % UInt64(partitions)) } ?? 0
        let offset = nextOffset[p, default: 0]
        nextOffset[p] = offset + 1
        let record = InputRecord(
            key: key, value: value, headers: headers, timestamp: timestamp,
            origin: RecordOrigin(topic: topic, partition: p, offset: offset))
        return deliver(record)
    }

    /// Text convenience for ``send(key:value:headers:timestamp:partition:)``.
    @discardableResult
    public mutating func send(
        key: String? = nil, value: String?, headers: [String: String] = [:], timestamp: Int64, partition: Int32? = nil
    ) -> TransformOutput {
        send(
            key: key.map { Array($0.utf8) }, value: value.map { Array($0.utf8) },
            headers: headers.keys.sorted().map { RecordHeader($0, headers[$0] ?? "") }, timestamp: timestamp,
            partition: partition)
    }

    /// Delivers an exact record again (or for the first time).
    @discardableResult
    public mutating func deliver(_ record: InputRecord) -> TransformOutput {
        delivered.append(record)
        let out = stage.process(record, state: &state, context: TransformContext(now: record.timestamp))
        collect(out, input: record)
        return out
    }

    /// Redelivers the records first delivered at positions `from...` (as after a consumer restart
    /// from an older committed offset); returns what the redelivery produced.
    @discardableResult
    public mutating func redeliver(from index: Int) -> TransformOutput {
        var firstDeliveries: [InputRecord] = []
        var seen = Set<RecordOrigin>()
        for r in delivered where seen.insert(r.origin).inserted { firstDeliveries.append(r) }
        var combined = TransformOutput()
        for r in firstDeliveries.dropFirst(max(0, index)) { combined.append(contentsOf: deliver(r)) }
        return combined
    }

    /// Lets time pass without a record.
    @discardableResult
    public mutating func advance(to now: Int64) -> TransformOutput {
        let out = stage.advance(state: &state, context: TransformContext(now: now))
        collect(out, input: .advance(at: now))
        return out
    }

    /// Outputs sent to one logical output.
    public func outputs(named output: String) -> [OutputRecord] { outputs.filter { $0.output == output } }

    /// Replaces the state (e.g. with one decoded from a checkpoint).
    public mutating func restore(_ state: S.State) { self.state = state }

    private mutating func collect(_ out: TransformOutput, input: InputRecord) {
        outputs.append(contentsOf: out.records)
        deadLetters.append(contentsOf: out.failures.map { DeadLetter(stage: stage.name, transform: stage.name, input: input, failure: $0) })
    }
}
