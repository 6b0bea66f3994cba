import Foundation
import Metrics
import Synchronization
import Workers

/// The records the senders write.
enum PushRecords {
    /// `notifications.sent` (output `sent`): keyed by the notification's dedupe key, so that the
    /// compacted topic keeps one record per notification and is the senders' ledger.
    /// `{"provider","id","dedupe_key","token"|"topic"|"condition","sent_at"}`.
    static func sent(provider: String, id: String, _ dedupeKey: String, recipient: PushRecipient) -> OutputRecord {
        var w = JSONWriter(capacity: 256)
        w.beginObject()
        w.key("provider"); w.string(provider)
        w.key("id"); w.string(id)
        w.key("dedupe_key"); w.string(dedupeKey)
        switch recipient {
        case .token(let t): w.key("token"); w.string(t)
        case .topic(let t): w.key("topic"); w.string(t)
        case .condition(let c): w.key("condition"); w.string(c)
        }
        w.key("sent_at"); w.int(Int64(Date().timeIntervalSince1970 * 1000))
        w.endObject()
        return OutputRecord(output: "sent", key: Array(dedupeKey.utf8), value: w.bytes, dedupeKey: "sent:\(provider):\(dedupeKey)")
    }

    /// `notifications.dead-tokens` (output `dead-tokens`): keyed by the token, for the app's
    /// backend to prune it. `{"provider","app","token","reason","dedupe_key"}`.
    static func deadToken(provider: String, app: String, token: String, reason: String, _ dedupeKey: String) -> OutputRecord {
        var w = JSONWriter(capacity: 256)
        w.beginObject()
        w.key("provider"); w.string(provider)
        w.key("app"); w.string(app)
        w.key("token"); w.string(token)
        w.key("reason"); w.string(reason)
        w.key("dedupe_key"); w.string(dedupeKey)
        w.endObject()
        return OutputRecord(output: "dead-tokens", key: Array(token.utf8), value: w.bytes, dedupeKey: "dead-token:\(provider):\(dedupeKey)")
    }
}

/// Every metric a sender exports, named once:
///
/// | metric | type | labels |
/// | --- | --- | --- |
/// | `push_sends_total` | counter | provider, outcome (`sent`, `dead-token`, `rejected`, `failed`, `retried`, `duplicate`) |
/// | `push_send_seconds` | histogram | provider (from the first attempt to the provider's acceptance) |
/// | `push_token_refreshes_total` | counter | provider |
public enum PushMetricName {
    public static let sends = "push_sends_total"
    public static let sendSeconds = "push_send_seconds"
    public static let tokenRefreshes = "push_token_refreshes_total"
    public static let all = [sends, sendSeconds, tokenRefreshes]
}

/// A sender's metric handles, made once.
struct PushMetrics: Sendable {
    let provider: String
    private let outcomes: [String: Counter]
    private let latency: Metrics.Timer

    static let outcomeNames = ["sent", "dead-token", "rejected", "failed", "retried", "duplicate"]

    init(provider: String) {
        self.provider = provider
        var outcomes: [String: Counter] = [:]
        for name in Self.outcomeNames {
            outcomes[name] = Counter(label: PushMetricName.sends, dimensions: [("provider", provider), ("outcome", name)])
        }
        self.outcomes = outcomes
        latency = Metrics.Timer(label: PushMetricName.sendSeconds, dimensions: [("provider", provider)])
    }

    func outcome(_ name: String) { outcomes[name]?.increment() }

    func sent(after duration: Duration) {
        outcome("sent")
        latency.recordNanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }
}

/// The dedupe keys of notifications already sent: checked before each send, filled by the
/// sender as it sends and by ``SentLedgerService`` from the `notifications.sent` topic (what other
/// workers, or this one before a restart, sent). Bounded: the oldest keys go first past `capacity`.
///
/// A send claims its key first (``claim(_:)``): while one send of a key is in flight, another of
/// the same key (the same notification emitted twice, as a stage that keeps its state per input
/// partition does when an entity arrives on two) waits for its outcome instead of going out too.
public final class SentLedger: Sendable {
    private struct State {
        var keys: Set<String> = []
        var order: [String] = []
        var head = 0
        var loaded = false
        var waiting: [CheckedContinuation<Void, Never>] = []
        /// Keys being sent, with the sends of the same key that wait for the outcome.
        var inFlight: [String: [CheckedContinuation<Void, Never>]] = [:]
    }

    public let capacity: Int
    private let state = Mutex(State())

    public init(capacity: Int = 1_000_000) { self.capacity = capacity }

    public func contains(_ key: String) -> Bool { state.withLock { $0.keys.contains(key) } }

    /// Whether the topic's records of the window were read (or there is no topic yet).
    public var isLoaded: Bool { state.withLock { $0.loaded } }

    public func markLoaded() {
        let waiting = state.withLock { s in
            s.loaded = true
            defer { s.waiting = [] }
            return s.waiting
        }
        for w in waiting { w.resume() }
    }

    /// Returns once loaded, or after `timeout` (a sender then goes on: the ledger bounds
    /// duplicates, it does not hold notifications back for ever). Whether it was loaded.
    public func waitLoaded(timeout: Duration) async -> Bool {
        if isLoaded { return true }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let now = self.state.withLock { s in
                        if s.loaded { return true }
                        s.waiting.append(c)
                        return false
                    }
                    if now { c.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
            // The waiter still parked is resumed by markLoaded later; release it now.
            self.markLoadedWaitersOnly()
        }
        return isLoaded
    }

    /// Resumes whoever waits without marking the ledger loaded (after a timed-out wait).
    private func markLoadedWaitersOnly() {
        let waiting = state.withLock { s in
            defer { s.waiting = [] }
            return s.waiting
        }
        for w in waiting { w.resume() }
    }

    public var count: Int { state.withLock { $0.keys.count } }

    /// Whether this send may go: false when `key` was sent; while another send of `key` is in
    /// flight, waits for it to finish and decides again. A true answer must be followed by
    /// ``finish(_:sent:)``.
    public func claim(_ key: String) async -> Bool {
        while true {
            enum Verdict { case sent, claimed, wait }
            let verdict = state.withLock { s -> Verdict in
                if s.keys.contains(key) { return .sent }
                if s.inFlight[key] != nil { return .wait }
                s.inFlight[key] = []
                return .claimed
            }
            switch verdict {
            case .sent: return false
            case .claimed: return true
            case .wait:
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { s -> Bool in
                        guard s.inFlight[key] != nil else { return true }
                        s.inFlight[key]?.append(c)
                        return false
                    }
                    if now { c.resume() }
                }
            }
        }
    }

    /// Ends a claimed send: records `key` when it was sent, and wakes the sends that waited for it.
    public func finish(_ key: String, sent: Bool) {
        if sent { insert(key) }
        let waiting = state.withLock { $0.inFlight.removeValue(forKey: key) ?? [] }
        for w in waiting { w.resume() }
    }

    public func insert(_ key: String) {
        state.withLock { s in
            guard s.keys.insert(key).inserted else { return }
            s.order.append(key)
            if s.keys.count > capacity {
                s.keys.remove(s.order[s.head])
                s.head += 1
                // Compact the queue once half of it is spent.
                if s.head > s.order.count / 2 {
                    s.order.removeFirst(s.head)
                    s.head = 0
                }
            }
        }
    }
}
