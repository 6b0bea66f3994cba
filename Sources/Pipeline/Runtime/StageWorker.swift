import Logging
import Workers

/// Header names on dead letters (their value is the original record's value, unchanged).
public enum DeadLetterHeader {
    public static let stage = "dead-letter.stage"
    public static let reason = "dead-letter.reason"
    public static let field = "dead-letter.field"
    public static let detail = "dead-letter.detail"
    public static let originTopic = "dead-letter.origin.topic"
    public static let originPartition = "dead-letter.origin.partition"
    public static let originOffset = "dead-letter.origin.offset"
}

/// Runs a pure ``Workers/Stage`` against Kafka, at least once.
///
/// For each consumed batch: every record goes through the stage; its outputs are produced to
/// the topics ``Routing`` names; each decode failure sends the *original* record (key, value,
/// headers) to the dead-letter topic with the stage, the reason and the origin (topic,
/// partition, offset) in headers, so nothing is lost and the worker keeps going. Only when every
/// output and dead letter of the batch is delivered are the batch's offsets stored for commit.
/// Up to ``maxBatchesInFlight`` batches are produced concurrently; their outputs are enqueued in
/// order and their offsets stored in order.
/// Stored offsets are committed in the background, when partitions are revoked, and on close.
///
/// The stage's state lives in memory for the worker's lifetime (checkpointing it with the
/// offsets is the runtime's next step).
public struct StageWorker<S: Stage>: Sendable {
    /// Where a stage's outputs go.
    public struct Routing: Sendable {
        /// Topic per output name; an output without an entry goes to the topic of its own name.
        public var outputs: [String: String]
        public var deadLetterTopic: String

        public init(outputs: [String: String] = [:], deadLetterTopic: String) {
            self.outputs = outputs
            self.deadLetterTopic = deadLetterTopic
        }

        func topic(for output: String) -> String { outputs[output] ?? output }
    }

    public struct Counts: Sendable, Hashable {
        public var consumed = 0
        public var produced = 0
        public var deadLettered = 0
    }

    public let stage: S
    public let consumer: KafkaConsumer
    public let producer: KafkaProducer
    public let routing: Routing
    public let logger: Logger
    /// Batches whose outputs may be awaiting delivery at once (1 = strictly one at a time).
    public var maxBatchesInFlight: Int

    public init(
        stage: S, consumer: KafkaConsumer, producer: KafkaProducer, routing: Routing,
        maxBatchesInFlight: Int = 4, logger: Logger = Logger(label: "stage-worker")
    ) {
        precondition(maxBatchesInFlight >= 1, "maxBatchesInFlight must be at least 1")
        self.maxBatchesInFlight = maxBatchesInFlight
        self.stage = stage
        self.consumer = consumer
        self.producer = producer
        self.routing = routing
        self.logger = logger
    }

    /// A batch whose outputs are on their way.
    private struct InFlight {
        var records: [ConsumerRecord]
        var ticket: DeliveryTicket
        var produced: Int
        var deadLettered: Int
    }

    /// Runs until the consumer's sequence ends (it is closed) or `shouldStop` says so after a
    /// batch; `shouldStop` sees the counts including batches still in flight, and everything in
    /// flight is delivered and stored before `run` returns. With
    /// ``ConsumerConfiguration/reportEndOfPartition`` on, a worker that catches up stores its
    /// finished work at once instead of when the next records arrive.
    public func run(until shouldStop: @Sendable (Counts) -> Bool = { _ in false }) async throws -> Counts {
        var counts = Counts()
        var state = stage.initialState
        var inFlight: [InFlight] = []

        /// Waits for the oldest batch's deliveries, then stores its offsets.
        func settleOldest() async throws {
            let batch = inFlight.removeFirst()
            let reports = await batch.ticket.reports()
            if let error = reports.first(where: { $0.error != nil })?.error {
                // Offsets stay unstored: after a restart the batch is read again.
                throw error
            }
            try consumer.store(batch.records)
            counts.consumed += batch.records.count
            counts.produced += batch.produced
            counts.deadLettered += batch.deadLettered
        }

        /// The counts once everything in flight is settled.
        func projected() -> Counts {
            inFlight.reduce(into: counts) { c, b in
                c.consumed += b.records.count
                c.produced += b.produced
                c.deadLettered += b.deadLettered
            }
        }

        for try await event in consumer {
            switch event {
            case .records(let batch):
                var outgoing: [ProducerRecord] = []
                outgoing.reserveCapacity(batch.count)
                var deadLetters = 0
                for record in batch {
                    let input = InputRecord(
                        key: record.key, value: record.value,
                        headers: record.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) },
                        timestamp: record.timestamp ?? 0,
                        origin: RecordOrigin(topic: record.topic, partition: record.partition, offset: record.offset))
                    let output = stage.process(input, state: &state, context: StageContext(now: input.timestamp))
                    for o in output.records {
                        outgoing.append(ProducerRecord(
                            topic: routing.topic(for: o.output), key: o.key, value: o.value,
                            headers: o.headers.map { KafkaHeader(key: $0.name, value: $0.value) }
                                + [KafkaHeader(key: "dedupe-key", string: o.dedupeKey)],
                            timestamp: record.timestamp))
                    }
                    for failure in output.failures {
                        outgoing.append(deadLetter(record, failure))
                        deadLetters += 1
                    }
                }
                let ticket = try await producer.submit(outgoing)
                inFlight.append(InFlight(records: batch, ticket: ticket, produced: outgoing.count - deadLetters, deadLettered: deadLetters))
                while inFlight.count >= maxBatchesInFlight { try await settleOldest() }
            case .revoked(let partitions):
                // Everything read from these partitions must be delivered and stored before they go.
                while !inFlight.isEmpty { try await settleOldest() }
                logger.info("partitions revoked", metadata: ["partitions": "\(partitions)"])
                try await consumer.commit()
            case .assigned(let partitions):
                logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            case .endOfPartition:
                // Nothing more to read right now: do not leave finished work unstored.
                while !inFlight.isEmpty { try await settleOldest() }
            }
            if shouldStop(projected()) { break }
        }
        while !inFlight.isEmpty { try await settleOldest() }
        return counts
    }

    private func deadLetter(_ record: ConsumerRecord, _ failure: DecodeFailure) -> ProducerRecord {
        logger.debug("dead letter", metadata: ["origin": "\(record.topic)[\(record.partition)]@\(record.offset)", "reason": "\(failure)"])
        return ProducerRecord(
            topic: routing.deadLetterTopic, key: record.key, value: record.value,
            headers: record.headers + [
                KafkaHeader(key: DeadLetterHeader.stage, string: stage.name),
                KafkaHeader(key: DeadLetterHeader.reason, string: failure.reason.rawValue),
                KafkaHeader(key: DeadLetterHeader.field, string: failure.field),
                KafkaHeader(key: DeadLetterHeader.detail, string: failure.detail),
                KafkaHeader(key: DeadLetterHeader.originTopic, string: record.topic),
                KafkaHeader(key: DeadLetterHeader.originPartition, string: String(record.partition)),
                KafkaHeader(key: DeadLetterHeader.originOffset, string: String(record.offset)),
            ],
            timestamp: record.timestamp)
    }
}
