import Synchronization
import Kafka

/// A counting semaphore for tasks: at most `limit` holders at once, the others suspended (not
/// blocking a thread) in FIFO order.
package final class AsyncGate: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var head = 0
    }

    private let state: Mutex<State>

    package init(limit: Int) { state = Mutex(State(available: max(1, limit))) }

    package func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let admitted = state.withLock { s in
                if s.available > 0 {
                    s.available -= 1
                    return true
                }
                s.waiters.append(continuation)
                return false
            }
            if admitted { continuation.resume() }
        }
    }

    package func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard s.head < s.waiters.count else {
                s.available += 1
                return nil
            }
            let c = s.waiters[s.head]
            s.head += 1
            if s.head > 1024, s.head * 2 > s.waiters.count {
                s.waiters.removeFirst(s.head)
                s.head = 0
            }
            return c
        }
        next?.resume()
    }

    /// Runs `body` holding one permit (released however `body` ends).
    package func withPermit<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }
}
