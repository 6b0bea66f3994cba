import Synchronization

/// Bounds work that may not end in time, whole: a close on a librdkafka thread, a fetch whose
/// server trickles its body, a name resolution or a file write that blocks, a transform that
/// ignores cancellation.
///
/// A task group cannot do this: it waits for every child, so a timer child that wins still
/// leaves the group waiting for work that does not end. Here the work runs in a task of its own
/// and whichever finishes first, the work or the timer, resumes the caller; the work is then
/// cancelled and not waited for (a blocked call cannot be interrupted: it ends in the
/// background).
public enum Deadline {
    /// The work's value, or nil once `duration` passes first (or the caller is cancelled).
    public static func race<T: Sendable>(_ duration: Duration, _ work: sending @escaping () async -> T) async -> T? {
        await race(until: .now + duration, work)
    }

    /// The work's value, or nil once `deadline` passes first (or the caller is cancelled). The
    /// work is `sending`: what it captures goes with it to its task (the caller must not touch
    /// it afterwards).
    public static func race<T: Sendable>(until deadline: ContinuousClock.Instant, _ work: sending @escaping () async -> T) async -> T? {
        let race = Race<T>()
        // Either may finish before the waiter is in place: `start` then resumes it at once.
        let worker = Task { race.finish(await work()) }
        let timer = Task { if (try? await Task.sleep(until: deadline)) != nil { race.finish(nil) } }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
                race.start(continuation, tasks: [worker, timer])
                if Task.isCancelled { race.finish(nil) }
            }
        } onCancel: {
            race.finish(nil)
        }
    }
}

/// ``Deadline/race(until:_:)``'s waiter and its two tasks: the first to finish resumes the
/// waiter and cancels the other.
private final class Race<T: Sendable>: Sendable {
    private struct State: ~Copyable {
        var continuation: CheckedContinuation<T?, Never>?
        var tasks: [Task<Void, Never>] = []
        /// Set by the first `finish`: its value (nil: the deadline or a cancellation).
        var outcome: T??
    }
    private let state = Mutex(State())

    /// Called once, with the tasks already running: one may have finished before.
    func start(_ continuation: CheckedContinuation<T?, Never>, tasks: [Task<Void, Never>]) {
        let early = state.withLock { s -> T?? in
            s.tasks = tasks
            if s.outcome == nil { s.continuation = continuation }
            return s.outcome
        }
        if let early {
            for task in tasks { task.cancel() }
            continuation.resume(returning: early)
        }
    }

    func finish(_ value: T?) {
        let (continuation, tasks) = state.withLock { s -> (CheckedContinuation<T?, Never>?, [Task<Void, Never>]) in
            guard s.outcome == nil else { return (nil, []) }
            s.outcome = .some(value)
            defer { s.continuation = nil }
            return (s.continuation, s.tasks)
        }
        for task in tasks { task.cancel() }
        continuation?.resume(returning: value)
    }
}
