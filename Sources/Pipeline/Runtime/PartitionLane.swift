import Foundation
import Kafka
import Metrics
import Workers

/// One assigned input partition (or, for a stage that joins co-partitioned inputs, the same
/// partition number of each input topic): its stage state and offsets, touched only by the
/// event loop, and the ``SettlementQueue`` of what it owes the broker.
///
/// Order is per lane: outputs are submitted in input order and settled in submission order;
/// a checkpoint and an offset become durable only after every earlier output of the lane is
/// delivered (or its input dead-lettered). Lanes settle independently, so a slow partition does
/// not hold back the others' commits.
final class PartitionLane {
    /// The lane's identity: the input partition, or `a+b` and the partition number for joined
    /// inputs (the changelog key names it).
    let id: TopicPartition
    /// The lane's input partitions.
    let partitions: [TopicPartition]
    /// The ordered stage's copy for this lane; nil for a concurrent stage.
    var runner: TransformRunner?
    /// Per input partition: the offset after the last input folded into the state (or whose
    /// outputs were submitted).
    var next: [TopicPartition: Int64] = [:]
    /// Per input partition: inputs below this offset are already in the restored state: skipped.
    var skipBelow: [TopicPartition: Int64] = [:]
    /// The offsets of a restored checkpoint, not handed to the settlement queue yet: the first
    /// batch or tick does (during the assignment librdkafka refuses to store them), so that a
    /// worker that only re-reads what the state holds still commits past it.
    var restoredOffsets: [TopicPartitionOffset] = []
    /// Per input partition rewound by an aborted transaction: records of it in consumer events up
    /// to this one (counted from the worker's start) were fetched before the rewind and are dropped.
    var staleThrough: [TopicPartition: Int] = [:]
    /// The state changed since the last checkpoint.
    var dirty = false
    var lastCheckpoint = ContinuousClock.now
    /// Timestamp of the last input processed (for the lag in seconds).
    var lastTimestamp: Int64 = 0
    let lagGauges: [TopicPartition: (records: Gauge, seconds: Gauge)]
    let settlement: SettlementQueue
    /// Concurrent stage: the latest record per key (its delivery, once submitted), so that a
    /// key's outputs are submitted in input order. Entries of settled records are dropped as the
    /// map grows.
    private var lastByKey: [[UInt8]: (sequence: Int, delivery: Promise<SettlementQueue.Delivery>)] = [:]
    private var enqueued = 0

    init(id: TopicPartition, partitions: [TopicPartition], runner: TransformRunner?, settlement: SettlementQueue, lagGauges: [TopicPartition: (records: Gauge, seconds: Gauge)]) {
        self.id = id
        self.partitions = partitions
        self.runner = runner
        self.settlement = settlement
        self.lagGauges = lagGauges
    }

    /// The lane's state and positions at one moment, to go back to (an aborted transaction).
    struct Snapshot: Sendable {
        fileprivate var runner: TransformRunner?
        fileprivate var next: [TopicPartition: Int64]
        fileprivate var dirty: Bool
        fileprivate var restoredOffsets: [TopicPartitionOffset]
    }

    func snapshot() -> Snapshot {
        Snapshot(runner: runner, next: next, dirty: dirty, restoredOffsets: restoredOffsets)
    }

    /// Back to `snapshot`.
    func rewind(to snapshot: Snapshot) {
        runner = snapshot.runner
        next = snapshot.next
        dirty = snapshot.dirty
        restoredOffsets = snapshot.restoredOffsets
    }

    /// This partition was sought back: records of it in consumer events up to `handedOut` were
    /// fetched before the seek and are dropped.
    func dropFetchedBeforeSeek(_ partition: TopicPartition, handedOut: Int) {
        staleThrough[partition] = handedOut
    }

    func enqueue(_ entry: SettlementQueue.Entry) {
        enqueued += 1
        settlement.enqueue(entry)
    }

    /// Writes the state to the changelog, covering the inputs before ``next``, once everything
    /// submitted before it is delivered.
    func checkpoint(to changelog: Changelog) throws {
        guard let runner, !next.isEmpty else { return }
        let offsets = next.map { TopicPartitionOffset($0.key.topic, $0.key.partition, offset: $0.value) }
            .sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        enqueue(.checkpoint(try changelog.record(state: runner.state, offsets: offsets, for: id), offsets: offsets))
        dirty = false
        lastCheckpoint = .now
    }

    /// The restored checkpoint's offsets, once: made durable when everything before is settled.
    func settleRestoredOffsets() {
        guard !restoredOffsets.isEmpty else { return }
        enqueue(.offsets(restoredOffsets))
        restoredOffsets = []
    }

    /// The delivery of the latest record with this key that may still be submitting.
    func lastDelivery(forKey key: [UInt8]?) -> Promise<SettlementQueue.Delivery>? { lastByKey[key ?? []]?.delivery }

    /// A concurrent stage's record, settled in offset order once its delivery is set.
    func enqueue(_ delivery: Promise<SettlementQueue.Delivery>, key: [UInt8]?) {
        if lastByKey.count >= 4096 {
            let settled = settlement.settled
            lastByKey = lastByKey.filter { $0.value.sequence > settled }
        }
        enqueue(.running(delivery))
        lastByKey[key ?? []] = (enqueued, delivery)
    }

    /// Waits until everything enqueued so far is settled; the lane goes on taking work.
    func settled() async { await settlement.settledSoFar() }

    /// Waits until everything enqueued is settled; the lane takes nothing more.
    func finish() async { await settlement.finish() }
}
