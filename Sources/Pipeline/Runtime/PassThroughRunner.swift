import Logging

/// Moves records from a consumer to a producer through a transform, at least once: a batch's
/// input offsets are stored only after all of its outputs are delivered, and stored offsets are
/// committed when partitions are revoked and on close.
///
/// This is the minimal runtime the demo uses; the worker runtime (dead letters, metrics, state
/// checkpoints) builds on the same loop.
public struct PassThroughRunner: Sendable {
    public let consumer: KafkaConsumer
    public let producer: KafkaProducer
    public let transform: @Sendable (ConsumerRecord) -> ProducerRecord?
    public let logger: Logger

    public init(consumer: KafkaConsumer, producer: KafkaProducer, logger: Logger = Logger(label: "runner"), transform: @escaping @Sendable (ConsumerRecord) -> ProducerRecord?) {
        self.consumer = consumer
        self.producer = producer
        self.transform = transform
        self.logger = logger
    }

    public struct Counts: Sendable {
        public var consumed = 0
        public var produced = 0
    }

    /// Runs until the consumer's sequence ends or `until` says to stop (checked after each batch).
    public func run(until shouldStop: @Sendable (Counts) -> Bool = { _ in false }) async throws -> Counts {
        var counts = Counts()
        for try await event in consumer {
            switch event {
            case .records(let batch):
                let outputs = batch.compactMap(transform)
                let reports = try await producer.send(outputs)
                if let failed = reports.first(where: { $0.error != nil }), let error = failed.error {
                    // Offsets stay unstored: the batch is read again after a restart.
                    throw error
                }
                try consumer.store(batch)
                counts.consumed += batch.count
                counts.produced += outputs.count
                if shouldStop(counts) { return counts }
            case .revoked(let partitions):
                logger.info("partitions revoked", metadata: ["partitions": "\(partitions)"])
                try await consumer.commit()
            case .assigned(let partitions):
                logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            case .endOfPartition:
                break
            }
        }
        return counts
    }
}
