import Synchronization

/// Bounds work that may not end in time, whole: a fetch whose server trickles its body, a name
/// resolution or a file write that blocks. (The Kafka client's `Deadline` does the same for
/// librdkafka's blocking calls; this module does not depend on it.)
public enum TimeLimit {
    /// `body`'s value, or nil once `deadline` passes first (or the caller is cancelled): `body`
    /// is then cancelled and not waited for (a blocked name resolution cannot be interrupted).
    public static func race<T: Sendable>(until deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async -> T) async -> T? {
        let race = Race<T>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
                race.start(continuation, tasks: [
                    Task { race.finish(await body()) },
                    Task { if (try? await Task.sleep(until: deadline)) != nil { race.finish(nil) } },
                ])
                if Task.isCancelled { race.finish(nil) }
            }
        } onCancel: {
            race.finish(nil)
        }
    }
}

/// ``TimeLimit/race(until:_:)``'s waiter and its two tasks: the first to finish resumes the
/// waiter and cancels the other.
final class Race<T: Sendable>: Sendable {
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

