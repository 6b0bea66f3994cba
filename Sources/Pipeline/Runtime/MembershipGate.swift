import Synchronization

/// Whether this worker may still own its partitions, as far as it can tell, so that a worker
/// that was frozen (SIGSTOP, a suspended VM) for longer than its session timeout does not write
/// checkpoints or commit for partitions the group has given to another member meanwhile: its
/// state is older than the new owner's, and a checkpoint of it would land after theirs.
///
/// A clock task ticks a few times a second; a gap of more than the session timeout between two
/// ticks means the whole process stood still, and membership is unsure until the consumer has
/// had `window` (a few heartbeats) to hear from the coordinator: an eviction shows at once in
/// ``KafkaConsumer/wasLost(_:)`` (checkpoints of those partitions are dropped) and later as a
/// `.lost` event (the lanes are abandoned); a rebalance event confirms membership at once.
/// Checkpoints and commits wait while it is unsure. (A busy event loop is no reason: the
/// consumer's own thread keeps the session alive meanwhile.)
final class MembershipGate: Sendable {
    private struct State {
        var lastTick: ContinuousClock.Instant = .now
        var unsureUntil: ContinuousClock.Instant?
        var running = true
    }

    let sessionTimeout: Duration
    let window: Duration
    /// Well below the session timeout, so that only a stand-still looks like one.
    let tick: Duration
    private let state = Mutex(State())

    init(sessionTimeout: Duration, heartbeat: Duration) {
        self.sessionTimeout = sessionTimeout
        self.window = max(.seconds(2), heartbeat * 2 + .seconds(1))
        self.tick = min(.milliseconds(500), sessionTimeout / 4)
    }

    /// Ticks until `stop()`.
    func run() async {
        while state.withLock({ $0.running }) {
            try? await Task.sleep(for: tick)
            ticked(now: .now)
        }
    }

    func stop() { state.withLock { $0.running = false } }

    func ticked(now: ContinuousClock.Instant) {
        state.withLock { s in
            if now - s.lastTick > sessionTimeout { s.unsureUntil = now + window }
            s.lastTick = now
        }
    }

    /// The coordinator answered (a rebalance event): membership is known again.
    func confirmed() { state.withLock { $0.unsureUntil = nil } }

    /// Until when membership is unsure now: within the window after a long stand-still, or
    /// right after one, before the clock task has noticed it.
    func unsure(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        state.withLock { s in
            guard s.running else { return nil }
            if now - s.lastTick > sessionTimeout { return now + .milliseconds(50) }
            if let until = s.unsureUntil, now < until { return until }
            return nil
        }
    }

    /// Waits until membership is not unsure (returns at once in the common case).
    func waitUntilSure() async {
        while !Task.isCancelled, let until = unsure(now: .now) {
            try? await Task.sleep(until: until, clock: .continuous)
        }
    }
}
