import Synchronization
import Kafka

/// Liveness and readiness of a worker, from what its loop reports.
///
/// - Live (`/healthz`): the event loop turned within ``livenessTimeout`` (it turns at least every
///   advance interval, also on an idle stream).
/// - Ready (`/readyz`): not stuck in a rebalance (joining or rebalancing for longer than
///   ``readinessTimeout``), commits not failing for longer than that, and making progress: a
///   partition with lag has had a record processed within that time. A worker with no
///   partitions after a settled rebalance (more workers than partitions) is idle, and ready.
public final class WorkerHealth: HealthReporting {
    public typealias Status = HealthStatus

    struct State {
        var lastLoopTurn: ContinuousClock.Instant
        /// Set while joining or rebalancing; cleared by an assignment or a steady group.
        var rebalancingSince: ContinuousClock.Instant?
        var commitFailingSince: ContinuousClock.Instant?
        var lastProgress: ContinuousClock.Instant
        var lagRecords: Int64 = 0
        var assigned = 0
        var stopping = false
    }

    public let livenessTimeout: Duration
    public let readinessTimeout: Duration
    private let state: Mutex<State>

    public init(livenessTimeout: Duration = .seconds(30), readinessTimeout: Duration = .seconds(30)) {
        self.livenessTimeout = livenessTimeout
        self.readinessTimeout = readinessTimeout
        let now = ContinuousClock.now
        state = Mutex(State(lastLoopTurn: now, rebalancingSince: now, lastProgress: now))
    }

    func loopTurned() { state.withLock { $0.lastLoopTurn = .now } }
    func progressed() { state.withLock { $0.lastProgress = .now } }
    func assigned(total: Int) {
        state.withLock { s in
            s.assigned = total
            s.rebalancingSince = nil
        }
    }
    func revoked(total: Int) {
        state.withLock { s in
            s.assigned = total
            if s.rebalancingSince == nil { s.rebalancingSince = .now }
        }
    }
    /// From librdkafka's statistics: the group's join state (`steady` when settled).
    func groupState(joinState: String, assignmentSize: Int64) {
        state.withLock { s in
            if joinState == "steady" {
                s.rebalancingSince = nil
            } else if s.rebalancingSince == nil {
                s.rebalancingSince = .now
            }
        }
    }
    func committed(ok: Bool) {
        state.withLock { s in
            if ok { s.commitFailingSince = nil } else if s.commitFailingSince == nil { s.commitFailingSince = .now }
        }
    }
    func lag(records: Int64) { state.withLock { $0.lagRecords = records } }

    /// What the status report says: partitions held, lag, how long since the loop turned, and
    /// why the worker is not ready (nil when it is).
    public func snapshot(now: ContinuousClock.Instant = .now) -> (assigned: Int, lagRecords: Int64, loopAge: Duration, lastError: String?) {
        let ready = readiness(now: now)
        return state.withLock { s in (s.assigned, s.lagRecords, now - s.lastLoopTurn, ready.ok ? nil : ready.reason) }
    }
    func stopping() { state.withLock { $0.stopping = true } }

    public func liveness(now: ContinuousClock.Instant = .now) -> Status {
        state.withLock { s in
            let quiet = now - s.lastLoopTurn
            return quiet <= livenessTimeout
                ? Status(ok: true, reason: "ok")
                : Status(ok: false, reason: "the event loop has not turned for \(quiet)")
        }
    }

    public func readiness(now: ContinuousClock.Instant = .now) -> Status {
        state.withLock { s in
            if s.stopping { return Status(ok: false, reason: "stopping") }
            if let since = s.rebalancingSince, now - since > readinessTimeout {
                return Status(ok: false, reason: "joining or rebalancing for \(now - since)")
            }
            if let since = s.commitFailingSince, now - since > readinessTimeout {
                return Status(ok: false, reason: "commits failing for \(now - since)")
            }
            if s.lagRecords > 0, now - s.lastProgress > readinessTimeout {
                return Status(ok: false, reason: "\(s.lagRecords) records behind and no progress for \(now - s.lastProgress)")
            }
            if s.rebalancingSince != nil { return Status(ok: true, reason: "ok (joining)") }
            return Status(ok: true, reason: s.assigned == 0 ? "ok (idle: no partitions assigned)" : "ok (\(s.assigned) partitions)")
        }
    }
}
