import Synchronization

/// What `Idempotency-Key` remembers: per client and key, the body it came with (a digest) and,
/// once answered, the answer; a retry of a request that failed part-way (503) also finds the
/// records the broker had acknowledged, so only the others are produced again. Bounded in count
/// (the oldest is forgotten first) and in time.
public final class IdempotencyWindow: Sendable {
    /// Where an acknowledged record was written.
    public struct Position: Sendable, Hashable, Codable {
        public var partition: Int32
        public var offset: Int64
    }

    public enum Begin: Sendable, Equatable {
        /// Not seen (or forgotten): go ahead, then ``finish(_:client:answer:)`` or ``fail(_:client:acknowledged:)``.
        case new
        /// Seen, answered: send this again, produce nothing.
        case answered(status: Int, body: [UInt8])
        /// Seen, failed part-way: these records (by index) are durable; produce the others.
        case resume(acknowledged: [Int: Position])
        /// The same key is being handled by another request right now.
        case inProgress
        /// The same key came with another body: a client error.
        case differentBody
    }

    private enum Entry {
        case inProgress(digest: UInt64, acknowledged: [Int: Position])
        case answered(digest: UInt64, status: Int, body: [UInt8])
        case failed(digest: UInt64, acknowledged: [Int: Position])
    }

    private struct State {
        var entries: [String: (entry: Entry, expires: ContinuousClock.Instant)] = [:]
        /// Keys in the order they were first seen (may hold keys already forgotten).
        var order: [String] = []
        var head = 0
    }

    public let capacity: Int
    public let window: Duration
    private let state = Mutex(State())

    public init(capacity: Int, window: Duration) {
        self.capacity = capacity
        self.window = window
    }

    public var count: Int { state.withLock { $0.entries.count } }

    /// Whether the key is remembered (in any state, not expired).
    public func knows(_ key: String, client: String, now: ContinuousClock.Instant = .now) -> Bool {
        state.withLock { s in s.entries[client + "\u{0}" + key].map { $0.expires > now } ?? false }
    }

    public func begin(_ key: String, client: String, digest: UInt64, now: ContinuousClock.Instant = .now) -> Begin {
        let id = client + "\u{0}" + key
        return state.withLock { s in
            if let (entry, expires) = s.entries[id], expires > now {
                switch entry {
                case .inProgress(let d, _): return d == digest ? .inProgress : .differentBody
                case .answered(let d, let status, let body): return d == digest ? .answered(status: status, body: body) : .differentBody
                case .failed(let d, let acknowledged):
                    guard d == digest else { return .differentBody }
                    s.entries[id] = (.inProgress(digest: d, acknowledged: acknowledged), expires)
                    return .resume(acknowledged: acknowledged)
                }
            }
            s.entries[id] = (.inProgress(digest: digest, acknowledged: [:]), now + window)
            s.order.append(id)
            Self.trim(&s, capacity: capacity, now: now)
            return .new
        }
    }

    /// The request was answered (2xx or 4xx): a retry gets the same answer.
    public func finish(_ key: String, client: String, status: Int, body: [UInt8]) {
        update(key, client: client) { .answered(digest: $0, status: status, body: body) }
    }

    /// The request failed part-way (503): a retry produces only what is not in `acknowledged`.
    public func fail(_ key: String, client: String, acknowledged: [Int: Position]) {
        update(key, client: client) { .failed(digest: $0, acknowledged: acknowledged) }
    }

    private func update(_ key: String, client: String, _ make: (UInt64) -> Entry) {
        let id = client + "\u{0}" + key
        state.withLock { s in
            guard let (entry, expires) = s.entries[id], case .inProgress(let digest, _) = entry else { return }
            s.entries[id] = (make(digest), expires)
        }
    }

    /// What another replica (or this service before a restart) recorded for a key, read from the
    /// shared topic (``IdempotencyTopic``): taken unless this service is handling the key right
    /// now, or the record has expired. `expiresIn` is what is left of its window.
    public func absorb(_ record: IdempotencyRecord, expiresIn: Duration, now: ContinuousClock.Instant = .now) {
        guard expiresIn > .zero else { return }
        let entry: Entry = record.status.map { .answered(digest: record.digest, status: $0, body: record.body) }
            ?? .failed(digest: record.digest, acknowledged: record.acknowledged)
        state.withLock { s in
            if let (current, expires) = s.entries[record.id], expires > now, case .inProgress = current { return }
            if s.entries[record.id] == nil { s.order.append(record.id) }
            s.entries[record.id] = (entry, now + expiresIn)
            Self.trim(&s, capacity: capacity, now: now)
        }
    }

    private static func trim(_ s: inout State, capacity: Int, now: ContinuousClock.Instant) {
        while s.head < s.order.count {
            let id = s.order[s.head]
            guard let (_, expires) = s.entries[id] else { s.head += 1; continue }
            guard s.entries.count > capacity || expires <= now else { break }
            s.entries[id] = nil
            s.head += 1
        }
        if s.head > 1024, s.head * 2 > s.order.count {
            s.order.removeFirst(s.head)
            s.head = 0
        }
    }
}

/// A key's outcome as the replicas of `ingest http` share it (``IdempotencyTopic``): answered
/// (`status` and `body`), or failed part-way (`acknowledged`: the records already durable).
public struct IdempotencyRecord: Sendable, Hashable, Codable {
    /// `client` NUL `key`: the window's id, the record's key.
    public var id: String
    public var digest: UInt64
    /// Epoch milliseconds after which the key is forgotten.
    public var expiresAt: Int64
    public var status: Int?
    public var body: [UInt8]
    public var acknowledged: [Int: IdempotencyWindow.Position]

    public init(client: String, key: String, digest: UInt64, expiresAt: Int64, status: Int?, body: [UInt8], acknowledged: [Int: IdempotencyWindow.Position]) {
        self.id = client + "\u{0}" + key
        self.digest = digest
        self.expiresAt = expiresAt
        self.status = status
        self.body = body
        self.acknowledged = acknowledged
    }
}
