import Kafka
import Synchronization
import Workers

/// Exactly once: outputs the broker refused for good (``KafkaError/cannotSucceed``: an ACL that
/// forbids the topic, a topic that does not exist, a record too large) in a transaction that was
/// aborted, by the input they came from and their topic. A failed produce dooms its transaction,
/// so such an output cannot be dead-lettered where it failed; the redo, which makes the same
/// output again, dead-letters it instead of producing it (as itself, naming where it was going;
/// a record too large as its input), and the transaction can commit. At least once needs none of
/// this: its settlement dead-letters a refused output in place.
///
/// An entry is used once (by the redo); an output refused again is added again.
final class UndeliverableOutputs: Sendable {
    private struct Key: Hashable {
        let origin: RecordOrigin
        let topic: String
    }

    /// The error, and the partition the output was refused on (-1: not known).
    private let refused = Mutex<[Key: (error: KafkaError, partition: Int32)]>([:])
    /// Whether `refused` may hold anything: the check on every submission is one load.
    private let holdsAny = Atomic<Bool>(false)

    func add(origin: RecordOrigin, topic: String, partition: Int32, error: KafkaError) {
        refused.withLock { $0[Key(origin: origin, topic: topic)] = (error, partition) }
        holdsAny.store(true, ordering: .releasing)
    }

    /// `records` (outputs of `inputs` by `sources`, and dead letters) with every refused output
    /// replaced by its dead letter; nil when none of them was refused.
    func divert(
        _ records: ProducerBatch, sources: [Int32], inputs: [InputRecord], stage: String, transform: String, deadLetterTopic: String
    ) -> (records: ProducerBatch, sources: [Int32])? {
        guard holdsAny.load(ordering: .acquiring) else { return nil }
        let hits: [Int: (error: KafkaError, partition: Int32)] = refused.withLock { refused in
            var hits: [Int: (error: KafkaError, partition: Int32)] = [:]
            var used: [Key] = []
            for i in 0..<records.count where sources[i] >= 0 {
                let key = Key(origin: inputs[Int(sources[i])].origin, topic: records.topic(i))
                if let refusal = refused[key] {
                    hits[i] = refusal
                    used.append(key)
                }
            }
            for key in used { refused.removeValue(forKey: key) }
            if refused.isEmpty { holdsAny.store(false, ordering: .releasing) }
            return hits
        }
        guard !hits.isEmpty else { return nil }
        var batch = ProducerBatch()
        var batchSources: [Int32] = []
        var inputsLettered = Set<Int32>()
        for i in 0..<records.count {
            guard let (error, partition) = hits[i] else {
                batch.append(i, of: records)
                batchSources.append(sources[i])
                continue
            }
            let input = inputs[Int(sources[i])]
            if error.isMessageTooLarge {
                // The stage made something no topic takes: its input goes instead, once.
                guard inputsLettered.insert(sources[i]).inserted else { continue }
                batch.append(RecordMapping.undelivered(
                    input, error: error, attempts: 1, firstFailure: nil, stage: stage, transform: transform, topic: deadLetterTopic))
            } else {
                batch.append(RecordMapping.undelivered(
                    output: i, of: records, partition: partition, origin: input.origin, error: error, attempts: 1,
                    firstFailure: nil, stage: stage, transform: transform, topic: deadLetterTopic))
            }
            batchSources.append(SettlementQueue.Delivery.noInput)
        }
        return (batch, batchSources)
    }
}
