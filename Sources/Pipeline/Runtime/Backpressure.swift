import Synchronization

/// Bounds the work a worker holds in flight (records and bytes submitted to the producer whose
/// outcome is not settled yet). Crossing the high-water mark pauses every assigned partition;
/// falling below half of both bounds resumes them. Partitions paused for a retry stay paused
/// until their own retry ends.
final class Backpressure: Sendable {
    struct State {
        var records = 0
        var bytes = 0
        var paused = false
        var retrying: Set<TopicPartition> = []
    }

    enum Action { case none, pause, resume }

    let maxRecords: Int
    let maxBytes: Int
    private let state = Mutex(State())

    init(maxRecords: Int, maxBytes: Int) {
        self.maxRecords = max(1, maxRecords)
        self.maxBytes = max(1, maxBytes)
    }

    /// Work submitted. `.pause` when the bound was just crossed; `pause` (a non-blocking
    /// librdkafka call) then runs under the lock, so a concurrent `remove` cannot resume before it.
    @discardableResult
    func add(records: Int, bytes: Int, pause: () -> Void = {}) -> Action {
        state.withLock { s in
            s.records += records
            s.bytes += bytes
            guard !s.paused, s.records >= maxRecords || s.bytes >= maxBytes else { return .none }
            s.paused = true
            pause()
            return .pause
        }
    }

    /// Work settled. `.resume` when it just fell below the low-water mark; `resume` gets the
    /// partitions not held by a retry and runs under the lock.
    @discardableResult
    func remove(records: Int, bytes: Int, resume: (_ except: Set<TopicPartition>) -> Void = { _ in }) -> Action {
        state.withLock { s in
            s.records -= records
            s.bytes -= bytes
            guard s.paused, s.records <= maxRecords / 2, s.bytes <= maxBytes / 2 else { return .none }
            s.paused = false
            resume(s.retrying)
            return .resume
        }
    }

    var isPaused: Bool { state.withLock { $0.paused } }
    var inFlight: (records: Int, bytes: Int) { state.withLock { ($0.records, $0.bytes) } }

    func beginRetry(_ tp: TopicPartition) { state.withLock { _ = $0.retrying.insert(tp) } }
    /// True when the partition may be resumed now (the worker is not paused as a whole).
    func endRetry(_ tp: TopicPartition) -> Bool {
        state.withLock { s in
            s.retrying.remove(tp)
            return !s.paused
        }
    }
}
