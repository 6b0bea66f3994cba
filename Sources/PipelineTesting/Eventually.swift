import Kafka

/// Waits, at most `limit`, until `condition` holds, checking every 20 ms. For state that is read,
/// not announced (counters, a broker's committed offsets); throws a timeout naming `what`.
public func eventually(_ what: String, within limit: Duration = .seconds(30), _ condition: () async throws -> Bool) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + limit
    while !(try await condition()) {
        guard clock.now < deadline else { throw KafkaError(code: .timedOut, message: "\(what) did not happen within \(limit)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
