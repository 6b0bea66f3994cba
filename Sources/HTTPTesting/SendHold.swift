import Synchronization

/// Holds a fake provider's sends once it has accepted a given number: a provider that stops
/// answering, so that a test can kill a worker at a known point however slowly the machine runs
/// it. A held send is answered 503 once released and is not recorded (its sender is gone by then).
final class SendHold: Sendable {
    private let limit = Mutex<Int?>(nil)

    func hold(after accepted: Int) { limit.withLock { $0 = accepted } }
    func release() { limit.withLock { $0 = nil } }

    /// Waits while `accepted()` is at the limit or over it; whether the send was held.
    func wait(accepted: () -> Int) async -> Bool {
        var held = false
        while let n = limit.withLock({ $0 }), accepted() >= n, !Task.isCancelled {
            held = true
            // A test double's poll: the hold ends by a call from the test, not by an event here.
            try? await Task.sleep(for: .milliseconds(5))
        }
        return held
    }
}
