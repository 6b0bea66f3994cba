import Foundation
import Kafka
import Logging
import ServiceLifecycle
import Synchronization

/// Fills a ``SentLedger`` from the `notifications.sent` topic and keeps it current: at start,
/// every record of the last `window` (found by time), then each record as it is written, by any
/// worker. The ledger is marked loaded once the start's read reached the end, and senders wait
/// for that (at most `loadTimeout`) before their first send, so that a restarted worker knows
/// what it sent before it died.
public final class SentLedgerService: Service, Sendable {
    let ledger: SentLedger
    let topic: String
    let kafka: KafkaConfiguration
    let window: Duration
    let logger: Logger

    public init(ledger: SentLedger, topic: String, kafka: KafkaConfiguration, window: Duration = .seconds(24 * 3600), logger: Logger) {
        self.ledger = ledger
        self.topic = topic
        self.kafka = kafka
        self.window = window
        self.logger = logger
    }

    public func run() async throws {
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(1)
        var start: [TopicPartitionOffset] = []
        // The topic may not exist yet (nothing was ever sent): wait for it, as a worker waits
        // for its inputs.
        while start.isEmpty && !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
                defer { Task { await admin.close() } }
                if try await admin.topicExists(topic) {
                    let partitions = try await admin.partitions(of: topic)
                    let since = Int64(Date().timeIntervalSince1970 * 1000) - Int64(window.components.seconds * 1000)
                    start = try await admin.offsetsForTimes(partitions, timestamp: since).map { found in
                        // No record since then: from the end.
                        found.offset >= 0 ? found : TopicPartitionOffset(found.topic, found.partition, offset: TopicPartitionOffset.end)
                    }
                } else {
                    ledger.markLoaded()
                }
            } catch {
                logger.warning("cannot read the sent ledger's topic; retrying", metadata: ["topic": "\(topic)", "error": "\(error)"])
            }
            if start.isEmpty { try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(2)) } }
        }
        guard !start.isEmpty else { return }
        let consumer = try reader.makeConsumer()
        try await consumer.assign(start)
        var ended = Set<Int32>()
        do {
            while !Task.isShuttingDownGracefully && !Task.isCancelled {
                let event = try await cancelWhenGracefulShutdown { try await TopicReader.next(consumer, within: .seconds(1)) }
                switch event {
                case .records(let batch):
                    for r in batch { if let key = r.key { ledger.insert(String(decoding: key, as: UTF8.self)) } }
                case .endOfPartition(let end):
                    ended.insert(end.partition)
                    if ended.count == start.count, !ledger.isLoaded {
                        ledger.markLoaded()
                        logger.info("sent ledger loaded", metadata: ["topic": "\(topic)", "keys": "\(ledger.count)"])
                    }
                default:
                    break
                }
            }
        } catch is CancellationError {
        } catch {
            try? await consumer.close(deadline: .seconds(5))
            throw error
        }
        try? await consumer.close(deadline: .seconds(5))
    }
}

