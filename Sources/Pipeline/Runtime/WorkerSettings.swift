import Kafka
import Metrics

/// How a worker process connects and stops.
public struct WorkerSettings: Sendable {
    public var kafka: KafkaConfiguration
    /// `session.timeout.ms` (keep it low against the local broker: tansu answers JoinGroup after
    /// about half of it).
    public var sessionTimeout: Duration?
    public var heartbeatInterval: Duration?
    public var maxPollInterval: Duration?
    /// `message.timeout.ms`: how long the producer retries one delivery before reporting it failed.
    public var messageTimeout: Duration?
    public var maxBatchSize = 1000
    /// Everything in flight must be delivered, checkpointed and committed within this once the
    /// worker begins to stop, whatever stopped it (a signal, `stopAfterInputs`, an error);
    /// past it ``StageService/run()`` throws ``WorkerError/shutdownOverran(_:)``.
    public var shutdownDeadline: Duration = .seconds(30)
    /// Begin a graceful stop once this many inputs were processed (demo, tests). Nil: run until stopped.
    public var stopAfterInputs: Int?
    /// Static group membership (`group.instance.id`).
    public var instanceID: String?
    /// Exactly-once: the producer's `transactional.id`. A restarted worker that keeps its id
    /// fences its predecessor and aborts the transaction it left open (otherwise that waits for
    /// `transactionTimeout`). Nil: the group, then the instance id, or the host name and the
    /// lowest slot number free on this host (a lock file held for the process's life), so a
    /// worker restarted on the same host takes its predecessor's id.
    public var transactionalID: String?
    /// Exactly-once: how long the coordinator lets a transaction stay open (`transaction.timeout.ms`).
    public var transactionTimeout: Duration = .seconds(60)
    /// Fault injection (tests): asked before each transaction that carries input offsets
    /// commits; an error makes that commit fail as a broker refusal would (the transaction aborts).
    var transactionFault: (@Sendable () -> KafkaError?)?
    /// How often librdkafka statistics refresh the `kafka_*` metrics and the group state (nil: never).
    public var statisticsInterval: Duration? = .seconds(5)
    /// Longest time the broker may hold a fetch waiting for data (`fetch.wait.max.ms`; librdkafka's
    /// default is 500 ms). Lower means lower latency on a quiet stream and more fetch requests.
    public var fetchMaxWait: Duration? = .milliseconds(100)
    /// How long the producer waits for more outputs to share a request (`linger.ms`). Longer than
    /// librdkafka's 5 ms: an idempotent producer keeps at most 5 requests in flight per partition,
    /// and while those wait on a slow broker past the linger, librdkafka's I/O thread polls in a
    /// loop. Shorter than the 20 ms of before: at 10 ms a loaded worker used about 5 % less CPU per
    /// record and went 10–13 % faster (docs/guarantees.md, "Worker processes", has both).
    public var linger: Duration = Self.defaultLinger
    public static let defaultLinger: Duration = .milliseconds(10)
    /// Above the in-flight bound the worker takes no more input; if it stays above it this long
    /// (deliveries are stuck), the partitions are also paused in librdkafka and polling goes on
    /// (librdkafka takes a member that stops polling out of its group; see ``Backpressure``).
    public var backpressurePauseAfter: Duration = .seconds(1)
    /// Where the stage's metrics go (nil: the process's `MetricsSystem`; tests pass a `TestMetrics`).
    public var metricsFactory: (any MetricsFactory)?
    /// Where every acknowledged output and dead letter is written down (topic, partition,
    /// offset, value hash), for a verifier (`pipelinectl chaos`) to tell a broker's loss of
    /// acknowledged records from the worker's. nil: nothing is written.
    public var acknowledgementLog: AcknowledgementLog?

    public init(kafka: KafkaConfiguration) { self.kafka = kafka }
    public init(bootstrapServers: [String]) { self.kafka = KafkaConfiguration(bootstrapServers: bootstrapServers) }
}
