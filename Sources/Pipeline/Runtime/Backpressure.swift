import Synchronization
import Kafka

/// Bounds the work a worker holds in flight (records and bytes submitted to the producer whose
/// outcome is not settled yet).
///
/// Crossing the high-water mark **closes** the gate: the worker takes no more input (its
/// consumer is not asked for the next batch, ``waitWhileClosed(atMost:)``) until half of both
/// bounds is settled. Partitions are not paused in librdkafka for that: a pause throws away
/// what librdkafka has fetched ahead for them, and the resume fetches it all again (librdkafka
/// restarts a resumed partition's fetcher at the application's position; see librdkafka
/// issues #1849 and #5343), so a worker throttled by its deliveries would read its input
/// several times over and sit idle while it does.
///
/// Only when the gate stays closed past a grace period (deliveries are stuck, e.g. the broker
/// is away) does the worker also **pause** every assigned partition in librdkafka
/// (``pauseConsumer(_:)``) and go on polling: librdkafka takes a member that stops polling for
/// `max.poll.interval.ms` out of its group, and rebalance events reach the worker only while it
/// polls. Falling below half resumes them. Partitions paused for a retry
/// stay paused until their own retry ends.
final class Backpressure: Sendable {
    enum Gate: Equatable {
        case open
        /// Above the bound: no more input is taken.
        case closed
        /// Closed for longer than the grace period: the assigned partitions are paused in librdkafka too.
        case paused
    }

    struct State {
        var records = 0
        var bytes = 0
        var gate = Gate.open
        var retrying: Set<TopicPartition> = []
        /// Waits not yet resumed, by id.
        var waits: [UInt64: Wait] = [:]
        var nextWait: UInt64 = 0
    }

    enum Wait {
        /// Begun; its continuation is not registered yet.
        case begun
        case waiting(CheckedContinuation<Bool, Never>)
        /// Its outcome came before its continuation did.
        case finished(Bool)
    }

    let maxRecords: Int
    let maxBytes: Int
    private let state = Mutex(State())

    init(maxRecords: Int, maxBytes: Int) {
        self.maxRecords = max(1, maxRecords)
        self.maxBytes = max(1, maxBytes)
    }

    /// Work submitted. True when it just crossed the bound (the gate closed).
    @discardableResult
    func add(records: Int, bytes: Int) -> Bool {
        state.withLock { s in
            s.records += records
            s.bytes += bytes
            guard s.gate == .open, s.records >= maxRecords || s.bytes >= maxBytes else { return false }
            s.gate = .closed
            return true
        }
    }

    /// Work settled. Below half of both bounds the gate opens: waiters go on, and if the
    /// partitions were paused, `resume` gets called (under the lock, so a concurrent pause
    /// cannot overtake it) with the partitions held by a retry, which stay paused.
    func remove(records: Int, bytes: Int, resume: (_ except: Set<TopicPartition>) -> Void = { _ in }) {
        let waiters: [CheckedContinuation<Bool, Never>] = state.withLock { s in
            s.records -= records
            s.bytes -= bytes
            guard s.gate != .open, s.records <= maxRecords / 2, s.bytes <= maxBytes / 2 else { return [] }
            if s.gate == .paused { resume(s.retrying) }
            s.gate = .open
            return Self.finishAll(&s, opened: true)
        }
        for waiter in waiters { waiter.resume(returning: true) }
    }

    /// Waits while the gate is closed: true once it is open (or the partitions are paused, and
    /// polling must go on), false after `limit` or when the task is cancelled.
    func waitWhileClosed(atMost limit: Duration) async -> Bool {
        let id: UInt64? = state.withLock { s in
            guard s.gate == .closed else { return nil }
            s.nextWait += 1
            s.waits[s.nextWait] = .begun
            return s.nextWait
        }
        guard let id else { return true }
        let timer = Task { [self] in
            try? await Task.sleep(for: limit)
            finish(id, opened: false)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let outcome: Bool? = state.withLock { s in
                    if case .finished(let outcome) = s.waits[id] {
                        s.waits[id] = nil
                        return outcome
                    }
                    s.waits[id] = .waiting(continuation)
                    return nil
                }
                if let outcome { continuation.resume(returning: outcome) }
            }
        } onCancel: {
            finish(id, opened: false)
        }
    }

    /// The gate stayed closed: pauses the partitions (`pause` runs under the lock, so a
    /// concurrent opening cannot resume before it). False if the gate opened meanwhile.
    func pauseConsumer(_ pause: () -> Void) -> Bool {
        state.withLock { s in
            guard s.gate == .closed else { return false }
            s.gate = .paused
            pause()
            return true
        }
    }

    /// `.paused`: the assigned partitions are paused in librdkafka (new ones must be paused too).
    var gate: Gate { state.withLock { $0.gate } }
    var inFlight: (records: Int, bytes: Int) { state.withLock { ($0.records, $0.bytes) } }

    func beginRetry(_ tp: TopicPartition) { state.withLock { _ = $0.retrying.insert(tp) } }
    /// True when the partition may be resumed now (the worker's partitions are not paused as a whole).
    func endRetry(_ tp: TopicPartition) -> Bool {
        state.withLock { s in
            s.retrying.remove(tp)
            return s.gate != .paused
        }
    }

    /// Ends one wait (its timer ran out or it was cancelled); nothing if it has ended already.
    private func finish(_ id: UInt64, opened: Bool) {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { s in
            switch s.waits[id] {
            case .begun:
                s.waits[id] = .finished(opened)
            case .waiting(let waiter):
                s.waits[id] = nil
                return waiter
            case .finished, nil:
                break
            }
            return nil
        }
        waiter?.resume(returning: opened)
    }

    /// Ends every wait (the gate opened): returns the continuations to resume outside the lock.
    private static func finishAll(_ s: inout State, opened: Bool) -> [CheckedContinuation<Bool, Never>] {
        var ready: [CheckedContinuation<Bool, Never>] = []
        for (id, wait) in s.waits {
            switch wait {
            case .begun: s.waits[id] = .finished(opened)
            case .waiting(let waiter):
                ready.append(waiter)
                s.waits[id] = nil
            case .finished: break
            }
        }
        return ready
    }
}
