import Synchronization

/// Bounds a wait for work that cannot be cancelled (a close on a librdkafka thread).
///
/// A task group cannot do this: it waits for every child, so a deadline child that wins still
/// leaves the group waiting for the uncancellable one. Here the work runs in its own task and
/// whichever finishes first, the work or the timer, resumes the caller; the work goes on in the
/// background when the timer wins.
public enum Deadline {
    /// The work's result, or nil when `deadline` passed first.
    public static func race<T: Sendable>(_ deadline: Duration, _ work: @escaping @Sendable () async -> T) async -> T? {
        let slot = Slot<T?>()
        return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
            slot.set(continuation)  // before either task can finish
            let timer = Task {
                do { try await Task.sleep(for: deadline) } catch { return }  // cancelled: the work won
                slot.resume(nil)
            }
            Task {
                let value = await work()
                slot.resume(value)
                timer.cancel()
            }
        }
    }

    /// A continuation resumed by the first of several racers.
    private final class Slot<T: Sendable>: Sendable {
        private let continuation = Mutex<CheckedContinuation<T, Never>?>(nil)
        func set(_ c: CheckedContinuation<T, Never>) { continuation.withLock { $0 = c } }
        func resume(_ value: T) {
            let c = continuation.withLock { c in
                defer { c = nil }
                return c
            }
            c?.resume(returning: value)
        }
    }
}
