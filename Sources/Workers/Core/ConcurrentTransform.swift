/// A transform whose work waits on the outside world (fetching, rendering and storing images), which
/// the runtime runs on many records at once.
///
/// Unlike ``Transform`` it does I/O and keeps no state; everything else of the contract holds:
/// values in, values out; what cannot be done comes back as ``TransformOutput/failures`` (dead
/// letters), after whatever retries the transform makes itself, and `process` never throws or
/// crashes on data. The runtime (`StageService`) keeps the guarantees of an ordered transform
/// around it: outputs of records with the same key leave in input order, and an input's offset
/// is committed only when it and every earlier input of its partition are done.
public protocol ConcurrentTransform: Sendable {
    /// Stable name, used in dead letters and in the topology (`chain: [NAME]`).
    var name: String { get }

    /// Handles one input record. Called concurrently, up to the runtime's concurrency.
    func process(_ record: InputRecord) async -> TransformOutput
}
