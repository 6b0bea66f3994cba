import Synchronization
import Kafka

/// Lets a kind of log line through at most `burst` times per `interval`; the first line after a
/// quiet spell says how many were suppressed. One line per dead letter or retry would flood the
/// log when a whole stream turns bad.
package final class LogRateLimiter: Sendable {
    let burst: Int
    let interval: Duration
    private let state = Mutex<[String: (windowStart: ContinuousClock.Instant, count: Int, suppressed: Int)]>([:])

    package init(burst: Int = 10, interval: Duration = .seconds(10)) {
        self.burst = burst
        self.interval = interval
    }

    /// nil: drop this line. Otherwise how many lines of this kind were dropped before it.
    package func admit(_ kind: String, now: ContinuousClock.Instant = .now) -> Int? {
        state.withLock { s in
            var entry = s[kind] ?? (now, 0, 0)
            if now - entry.windowStart >= interval { entry = (now, 0, entry.suppressed) }
            entry.count += 1
            defer { s[kind] = entry }
            guard entry.count <= burst else {
                entry.suppressed += 1
                return nil
            }
            let suppressed = entry.suppressed
            entry.suppressed = 0
            return suppressed
        }
    }
}
