import Logging
import Synchronization

/// The producer a long-running service sends through, replaced by a new one when it cannot
/// deliver any more (``KafkaProducer/unusable``: a fatal error, or a broker that fenced it or lost
/// its producer id, as a restarted broker does, or stuck bumping the epoch of an id the broker
/// lost, seen in its statistics): what it could not deliver was reported failed,
/// and the records sent next go through a new producer id instead of failing until the process
/// is restarted. ``replacements`` counts the new ones, for health and metrics.
public final class ProducerSlot: Sendable {
    private let make: @Sendable () throws -> KafkaProducer
    private let slot: Mutex<KafkaProducer>
    private let replaced = Atomic<Int>(0)
    private let logger: Logger

    public init(logger: Logger, make: @escaping @Sendable () throws -> KafkaProducer) throws {
        self.make = make
        self.slot = Mutex(try make())
        self.logger = logger
    }

    /// A slot of producers that make a record durable before they acknowledge it: acks=all,
    /// idempotent (no duplicates from librdkafka's own retries), `deliveryTimeout` to acknowledge.
    /// `linger` (librdkafka's 5 ms when nil) is how long a record waits for others to share its
    /// request: time that a caller waiting for the acknowledgement waits too. `serving`: where
    /// each producer serves its delivery reports.
    public static func durable(
        kafka: KafkaConfiguration, deliveryTimeout: Duration, linger: Duration? = nil, serving: DeliveryReportServing = .thread, logger: Logger
    ) throws -> ProducerSlot {
        var configuration = ProducerConfiguration(kafka: kafka)
        configuration.acks = .all
        configuration.idempotence = true
        configuration.messageTimeout = deliveryTimeout
        configuration.linger = linger
        // Its callers wait (an HTTP client answered 503 until the broker is back): reconnect
        // within a second of the broker's return, not after librdkafka's backoff, which grows to
        // 10 s while a broker is away (unless the operator set it).
        if configuration.kafka.raw["reconnect.backoff.max.ms"] == nil { configuration.kafka.raw["reconnect.backoff.max.ms"] = "1000" }
        // Statistics every second: how the producer tells that librdkafka is stuck bumping the
        // epoch of a producer id the broker lost (``EpochBumpWatch``), so that it is replaced.
        configuration.statisticsInterval = .seconds(1)
        return try ProducerSlot(logger: logger) { [configuration] in
            try KafkaProducer(configuration: configuration, logger: logger, serving: serving)
        }
    }

    /// How many times the producer was replaced.
    public var replacements: Int { replaced.load(ordering: .relaxed) }

    /// The producer to use now: a new one if the last one cannot deliver any more (the old one
    /// is closed in the background; its outstanding records fail).
    public func current() -> KafkaProducer {
        let (producer, retired) = slot.withLock { producer -> (KafkaProducer, KafkaProducer?) in
            guard let reason = producer.unusable else { return (producer, nil) }
            do {
                let fresh = try make()
                logger.warning("the producer cannot deliver any more (\(reason)); sending through a new one")
                let old = producer
                producer = fresh
                replaced.add(1, ordering: .relaxed)
                return (fresh, old)
            } catch {
                logger.error("the producer cannot deliver any more (\(reason)) and a new one could not be made: \(error)")
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
