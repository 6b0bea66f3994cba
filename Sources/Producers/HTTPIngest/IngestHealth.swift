import Pipeline
import Synchronization

/// `/healthz` and `/readyz` of `pipelinectl ingest http`.
///
/// - Live: the server is listening (the process answers at all).
/// - Ready: listening, not stopping, and the broker is taking records: not ready from the first
///   failed delivery until the next acknowledged one (a load balancer then sends posts to
///   another instance; posts still get 503 with `Retry-After` meanwhile).
public final class IngestHealth: HealthReporting {
    private struct State {
        var listening = false
        var stopping = false
        var failingSince: ContinuousClock.Instant?
        var lastError = ""
    }

    private let state = Mutex(State())

    public init() {}

    func listening() { state.withLock { $0.listening = true } }
    func stopping() { state.withLock { $0.stopping = true } }
    func delivered() { state.withLock { $0.failingSince = nil } }
    func deliveryFailed(_ error: String, now: ContinuousClock.Instant = .now) {
        state.withLock { s in
            if s.failingSince == nil { s.failingSince = now }
            s.lastError = error
        }
    }

    public func liveness(now: ContinuousClock.Instant = .now) -> HealthStatus {
        state.withLock { $0.listening ? HealthStatus(ok: true, reason: "ok") : HealthStatus(ok: false, reason: "not listening yet") }
    }

    public func readiness(now: ContinuousClock.Instant = .now) -> HealthStatus {
        state.withLock { s in
            if !s.listening { return HealthStatus(ok: false, reason: "not listening yet") }
            if s.stopping { return HealthStatus(ok: false, reason: "stopping") }
            if let since = s.failingSince {
                return HealthStatus(ok: false, reason: "deliveries failing for \(now - since): \(s.lastError)")
            }
            return HealthStatus(ok: true, reason: "ok")
        }
    }
}
