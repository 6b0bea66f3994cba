import Synchronization

/// Bounds a wait for work that cannot be cancelled (a close on a librdkafka thread).
///
/// A task group cannot do this: it waits for every child, so a deadline child that wins still
/// leaves the group waiting for the uncancellable one. Here the work runs in its own task and
/// whichever finishes first, the work or the timer, resumes the caller; the work goes on in the
/// background when the timer wins.
public enum Deadline {
    /// The work's result, or nil when `deadline` passed first. The work is `sending`: what it
    /// captures goes with it to its task (the caller must not touch it afterwards).
    public static func race<T: Sendable>(_ deadline: Duration, _ work: sending @escaping () async -> T) async -> T? {
        let slot = Slot<T?>()
        let timer = Task {
            do { try await Task.sleep(for: deadline) } catch { return }  // cancelled: the work won
            slot.resolve(nil)
        }
        Task {
            let value = await work()
            slot.resolve(value)
            timer.cancel()
        }
        return await withCheckedContinuation { slot.wait($0) }
    }

    /// The first of several racers' results, for one waiter that may come before or after it.
    private final class Slot<T: Sendable>: Sendable {
        private enum State {
            case empty
            case waiting(CheckedContinuation<T, Never>)
            case resolved(T)
            case done
        }
        private let state = Mutex(State.empty)

        func wait(_ c: CheckedContinuation<T, Never>) {
            let ready: T? = state.withLock { s in
                if case .resolved(let value) = s {
                    s = .done
                    return value
                }
                s = .waiting(c)
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }

        func resolve(_ value: T) {
            let waiter: CheckedContinuation<T, Never>? = state.withLock { s in
                switch s {
                case .empty:
                    s = .resolved(value)
                    return nil
                case .waiting(let c):
                    s = .done
                    return c
                case .resolved, .done:
                    return nil
                }
            }
            waiter?.resume(returning: value)
        }
    }
}
