import Workers

/// What the chaos verifier does to a running pipeline, drawn from a seed so that a run can be
/// repeated: faults at random moments of the fault window, in the manner of Jepsen's nemesis.
public struct ChaosPlan: Sendable, Equatable, CustomStringConvertible {
    public enum Fault: String, CaseIterable, Sendable {
        /// SIGKILL a worker at once (no waiting for a settled group) and start a new one after `hold`.
        case kill
        /// SIGSTOP a worker for `hold` (longer than its session timeout: the group moves on without
        /// it), then SIGCONT: a zombie comes back with its old state and deliveries in flight.
        case pause
        /// A worker joins; after `hold` it leaves with SIGTERM.
        case joinLeave = "join-leave"
        /// The output topic's leader broker is down for `hold`: output deliveries fail and are
        /// retried (librdkafka's mock cluster only).
        case outputsDown = "outputs-down"
        /// The broker is killed and restarted on its storage (the local broker with S3 storage only).
        case brokerRestart = "broker-restart"
        /// The output topic's broker answers the next produce requests with PRODUCER_FENCED, as a
        /// broker that lost the producer's state does: the worker that gets them cannot deliver
        /// any more and stops (exit 1, nothing after it committed); a new one starts, as an
        /// orchestrator would (librdkafka's mock cluster only).
        case producerFenced = "producer-fenced"
        /// A member is evicted while its outputs are stuck: the output topic's leader is down for
        /// `hold` (longer than the workers' `max.poll.interval.ms`, which the run lowers, with the
        /// eager protocol) and a worker joins; a member whose revocation waits for its stuck
        /// outputs past the interval is taken out of the group, a new owner restores and goes on,
        /// and the evicted member's checkpoints must never land after the new owner's (the
        /// changelog checks hold strictly). Mock cluster only.
        case evict
        /// The image server of the thumbnail workload goes slow for `hold`: bodies trickle (a
        /// byte every 50 ms) and every fifth request is left hanging; fetches run into their
        /// time limits while workers are killed and stopped.
        case slowUpstream = "slow-upstream"
    }

    /// `max.poll.interval.ms` of the workers of a run with ``Fault/evict`` (at least the session
    /// timeout, 6 s on the mock cluster).
    public static let evictionPollInterval: Duration = .seconds(8)

    public struct Step: Sendable, Equatable, CustomStringConvertible {
        /// From the start of the fault window.
        public var at: Duration
        public var fault: Fault
        /// Which running worker (an index into those running then, modulo their number).
        public var worker: Int
        public var hold: Duration

        public var description: String { "+\(at.seconds)s \(fault.rawValue) w\(worker) hold \(hold.seconds)s" }
    }

    public var seed: UInt64
    public var steps: [Step]

    public var description: String { "seed \(seed): " + steps.map(\.description).joined(separator: ", ") }

    /// `count` faults drawn from `faults` over `window`; pauses last past `sessionTimeout`; an
    /// outage of the outputs lasts at least `minimumOutage` (1 s by default: long enough for low
    /// retries to run out, it makes deliveries fail past their attempts).
    public static func make(
        seed: UInt64, window: Duration, faults: [Fault], count: Int, sessionTimeout: Duration, minimumOutage: Duration = .seconds(1)
    ) -> ChaosPlan {
        var rng = SplitMix64(seed: seed)
        let windowMs = max(1, window.milliseconds)
        var steps: [Step] = []
        guard !faults.isEmpty else { return ChaosPlan(seed: seed, steps: []) }
        for _ in 0..<count {
            let fault = faults[Int(rng.next() % UInt64(faults.count))]
            let at = Int64(rng.next() % UInt64(windowMs))
            let holdMs: Int64
            switch fault {
            case .kill: holdMs = 200 + Int64(rng.next() % 2_800)
            case .pause: holdMs = sessionTimeout.milliseconds + 1_000 + Int64(rng.next() % 2_000)
            case .joinLeave: holdMs = 2_000 + Int64(rng.next() % 6_000)
            case .outputsDown: holdMs = minimumOutage.milliseconds + Int64(rng.next() % 5_000)
            case .brokerRestart, .producerFenced: holdMs = 0
            case .evict: holdMs = evictionPollInterval.milliseconds + 4_000 + Int64(rng.next() % 4_000)
            case .slowUpstream: holdMs = 3_000 + Int64(rng.next() % 6_000)
            }
            steps.append(Step(at: .milliseconds(at), fault: fault, worker: Int(rng.next() % 16), hold: .milliseconds(holdMs)))
        }
        steps.sort { $0.at < $1.at }
        return ChaosPlan(seed: seed, steps: steps)
    }
}

extension Duration {
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
    var seconds: String {
        let ms = milliseconds
        return ms % 1000 == 0 ? "\(ms / 1000)" : String(Double(ms) / 1000)
    }
}
