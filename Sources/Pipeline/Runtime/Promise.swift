import Synchronization

/// A value that is set once (a concurrent stage's record, once its outputs are submitted);
/// tasks wait for it. A wait ends with the value, or with nil when the waiting task is
/// cancelled, so that whoever waits can be stopped while the work it waits for cannot.
final class Promise<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [Int: CheckedContinuation<Value?, Never>] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    init() {}

    /// Sets the value (once; later calls change nothing) and resumes every waiter.
    func fulfil(_ value: Value) {
        let waiters = state.withLock { s -> [CheckedContinuation<Value?, Never>] in
            guard s.value == nil else { return [] }
            s.value = value
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    /// The value once it is set; nil if the task is cancelled first.
    func value() async -> Value? {
        let id = state.withLock { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                let now = state.withLock { s -> Value?? in
                    if let value = s.value { return .some(value) }
                    if Task.isCancelled { return .some(nil) }
                    s.waiters[id] = continuation
                    return .none
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: nil)
        }
    }
}
