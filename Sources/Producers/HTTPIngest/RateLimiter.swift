import Kafka
import Synchronization

/// Requests per client per second, as a token bucket: `burst` requests at once, refilled at
/// `perSecond`. A refused request learns how long until its next one would be admitted.
public final class RateLimiter: Sendable {
    public let perSecond: Double
    public let burst: Double
    private let buckets = Mutex<[String: (tokens: Double, at: ContinuousClock.Instant)]>([:])

    public init(perSecond: Double, burst: Double? = nil) {
        precondition(perSecond > 0, "a rate limit is positive")
        self.perSecond = perSecond
        self.burst = max(1, burst ?? perSecond)
    }

    /// nil: admitted (one token taken); else how long until a token is there.
    public func admit(_ client: String, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            var bucket = buckets[client] ?? (burst, now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.at).asSeconds * perSecond)
            bucket.at = now
            defer { buckets[client] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return .milliseconds(Int64(((1 - bucket.tokens) / perSecond * 1000).rounded(.up)))
        }
    }
}
