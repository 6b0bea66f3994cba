/// Tells from an idempotent producer's statistics that it is stuck bumping its own epoch.
///
/// When a broker answers `UNKNOWN_PRODUCER_ID` to a request with no earlier unacknowledged one,
/// librdkafka drains the partition, bumps the producer's epoch locally and sends the records
/// again, without counting a retry (`rd_kafka_handle_Produce_error`). A broker that lost the
/// producer id itself (tansu after a restart on memory storage) refuses every bumped epoch as
/// well, so this repeats every few milliseconds until the records time out, and every record
/// sent meanwhile times out too: the producer never reports an error that says it is unusable.
/// With more than one request in flight per partition the second refusal is fatal instead.
///
/// An epoch bumped ``minimumBumps`` times or more between two statistics, at
/// ``bumpsPerSecond`` or faster, is that loop: a working producer bumps its epoch once per
/// failed batch, not dozens of times a second.
struct EpochBumpWatch {
    static let minimumBumps: Int64 = 5
    static let bumpsPerSecond: Double = 10

    private var last: (id: Int64, epoch: Int64, at: ContinuousClock.Instant)?

    /// Takes the latest statistics; returns how many bumps since the previous ones when they are
    /// the loop, nil otherwise.
    mutating func observe(producerID: Int64, epoch: Int64, at now: ContinuousClock.Instant) -> Int64? {
        defer { last = producerID >= 0 && epoch >= 0 ? (producerID, epoch, now) : nil }
        guard let last, last.id == producerID, epoch >= 0 else { return nil }
        // The epoch is a 16-bit number that wraps.
        let bumps = (epoch - last.epoch + 32768) % 32768
        let seconds = (now - last.at).asSeconds
        guard bumps >= Self.minimumBumps, seconds > 0, Double(bumps) / seconds >= Self.bumpsPerSecond else { return nil }
        return bumps
    }
}
