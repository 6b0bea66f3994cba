import Metrics
import MetricsTestKit
import Pipeline

/// What a stage did, read from its metrics (the one store of those counts) through
/// swift-metrics' MetricsTestKit. A service whose settings went through ``WorkerSettings/measured()``
/// has them as ``StageService/readings``.
public struct StageReadings: Sendable {
    public let metrics: TestMetrics
    public let stage: String

    public init(metrics: TestMetrics, stage: String) {
        self.metrics = metrics
        self.stage = stage
    }

    private func total(_ label: String, _ more: [(String, String)] = []) -> Int {
        Int(metrics.counterTotal(label: label, dimensions: [("stage", stage)] + more))
    }

    private func last(_ label: String) -> Int {
        let recorders = metrics.recorders(label: label, dimensions: [("stage", stage)])
        return recorders.compactMap(\.lastValue).map { Int($0) }.reduce(0, +)
    }

    /// Inputs handed to the stage (`pipeline_records_in_total`).
    public var processed: Int { total(MetricName.recordsIn) }
    /// Inputs whose outputs and dead letters are all delivered.
    public var inputsSettled: Int { total(MetricName.inputsSettled) }
    /// Outputs delivered to every output topic (dead letters and checkpoints not included).
    public var produced: Int { total(MetricName.recordsOut) }
    /// Dead letters delivered, whatever the reason.
    public var deadLettered: Int { total(MetricName.deadLetters) }
    public var retries: Int { total(MetricName.retries) }
    public var resent: Int { total(MetricName.resent) }
    public var rebalances: Int { total(MetricName.rebalances) }
    public var commitFailures: Int { total(MetricName.commitFailures) }
    public var deliveryErrors: Int { total(MetricName.deliveryErrors) }
    public var checkpoints: Int { total(MetricName.checkpoints) }
    public var restoredPartitions: Int { total(MetricName.restoredPartitions) }
    public var backpressureWaits: Int { total(MetricName.backpressureWaits) }
    public var transactionsCommitted: Int { total(MetricName.transactions, [("outcome", "committed")]) }
    public var transactionsAborted: Int { total(MetricName.transactions, [("outcome", "aborted")]) }
    public var abortedOutputs: Int { total(MetricName.abortedRecords, [("kind", "output")]) }
    public var abortedDeadLetters: Int { total(MetricName.abortedRecords, [("kind", "dead-letter")]) }
    /// Gauges, as last recorded (once per tick).
    public var fetchedRecords: Int { last(MetricName.fetchedRecords) }
    public var pausedPartitions: Int { last(MetricName.pausedPartitions) }
    public var inFlightRecords: Int { last(MetricName.inFlightRecords) }
    public var producerQueue: Int { last(MetricName.producerQueue) }
    /// Checkpoints taken and not yet durable (recorded as they change).
    public var checkpointsWaiting: Int { last(MetricName.checkpointsWaiting) }
}

extension WorkerSettings {
    /// These settings with a MetricsTestKit factory of their own, so that a test reads what
    /// this one service did (two services on one factory would add up).
    public func measured() -> WorkerSettings {
        var settings = self
        settings.metricsFactory = TestMetrics()
        return settings
    }
}

extension StageService {
    /// The stage's metrics as a test reads them; the service's settings must have gone through
    /// ``WorkerSettings/measured()``.
    public var readings: StageReadings {
        guard let metrics = metricsFactory as? TestMetrics else {
            preconditionFailure("\(definition.name): give the service settings.measured() to read its metrics")
        }
        return StageReadings(metrics: metrics, stage: definition.name)
    }
}
