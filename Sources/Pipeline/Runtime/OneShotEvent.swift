import Synchronization

/// Something that happens once (a stop was requested, the loop ended); tasks wait for it. A
/// wait ends when the event happens or the waiting task is cancelled.
final class OneShotEvent: Sendable {
    private struct State {
        var happened = false
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    init() {}

    var happened: Bool { state.withLock { $0.happened } }

    func fire() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard !s.happened else { return [] }
            s.happened = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the event happened, or when the task is cancelled.
    func wait() async {
        let id = state.withLock { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.happened || Task.isCancelled { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Runs `body` until it returns or the event happens, whichever is first; then cancels it
    /// and waits for it to end.
    func cancelling(_ body: @escaping @Sendable () async -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await body() }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
    }
}
