/// Forwards every record unchanged (tombstones included) to the output ``output``.
/// The demo's transform, and a baseline for measuring the runtime without a transform.
public struct PassThroughTransform: Transform {
    public var output: String
    public init(output: String = "out") { self.output = output }

    public var name: String { "pass-through" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        let origin = record.origin
        out.append(OutputRecord(
            output: output, key: record.key, value: record.value.map(Array.init), headers: record.headers,
            dedupeKey: "\(origin.topic)/\(origin.partition)/\(origin.offset)"))
    }
}
