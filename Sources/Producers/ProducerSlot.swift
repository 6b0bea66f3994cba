import Kafka
import Logging
import Synchronization

/// The producer a long-running producer service sends through, replaced by a new one when it
/// fails for good (a fatal error, e.g. an idempotent producer whose state a restarted broker
/// lost): what it could not deliver was reported failed, and the records sent next go through
/// a new producer id instead of failing until the process is restarted.
public final class ProducerSlot: Sendable {
    private let make: @Sendable () throws -> KafkaProducer
    private let slot: Mutex<KafkaProducer>
    private let logger: Logger

    public init(logger: Logger, make: @escaping @Sendable () throws -> KafkaProducer) throws {
        self.make = make
        self.slot = Mutex(try make())
        self.logger = logger
    }

    /// A slot of producers that make a record durable before they acknowledge it: acks=all,
    /// idempotent (no duplicates from librdkafka's own retries), `deliveryTimeout` to acknowledge.
    public static func durable(kafka: KafkaConfiguration, deliveryTimeout: Duration, logger: Logger) throws -> ProducerSlot {
        var configuration = ProducerConfiguration(kafka: kafka)
        configuration.acks = .all
        configuration.idempotence = true
        configuration.messageTimeout = deliveryTimeout
        return try ProducerSlot(logger: logger) { [configuration] in
            try KafkaProducer(configuration: configuration, logger: logger)
        }
    }

    /// The producer to use now: a new one if the last one failed for good (the old one is
    /// closed in the background; its outstanding records fail).
    public func current() -> KafkaProducer {
        let (producer, retired) = slot.withLock { producer -> (KafkaProducer, KafkaProducer?) in
            guard let fatal = producer.fatalError else { return (producer, nil) }
            do {
                let fresh = try make()
                logger.warning("the producer failed for good (\(fatal)); sending through a new one")
                let old = producer
                producer = fresh
                return (fresh, old)
            } catch {
                logger.error("the producer failed for good (\(fatal)) and a new one could not be made: \(error)")
                return (producer, nil)
            }
        }
        if let retired { Task { await retired.close(deadline: .seconds(1)) } }
        return producer
    }

    /// Closes the producer in use, delivering what it holds within `deadline`.
    public func close(deadline: Duration) async {
        await slot.withLock { $0 }.close(deadline: deadline)
    }
}
