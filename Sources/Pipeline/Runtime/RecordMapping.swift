import Workers
import Kafka

/// The one place Kafka records and stage records convert into each other.
package enum RecordMapping {
    /// A consumed record as a stage sees it. A record without a timestamp gets `now`.
    package static func input(_ r: ConsumerRecord, now: Int64) -> InputRecord {
        InputRecord(
            key: r.key, sharing: r.valueBytes,
            headers: r.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) },
            timestamp: r.timestamp ?? now,
            origin: RecordOrigin(topic: r.topic, partition: r.partition, offset: r.offset))
    }

    /// A stage's outputs and dead letters for one input (or an `advance`), written into
    /// `outgoing` with the input's timestamp: each output with its headers and its dedupe key as
    /// the `dedupe-key` header (straight from the stage's string), each dead letter with its
    /// `dead-letter.*` headers. Each output is tagged `source` in `sources` (its input's index in
    /// a delivery), each dead letter `deadLetterSource`. `topic` maps an output name to its
    /// topic; it is asked once per run of the same name.
    @inline(__always)
    package static func append(
        _ out: StageOutput, of input: InputRecord, source: Int32, stage: String, topic: (String) -> String, deadLetterTopic: String,
        deadLetterSource: Int32, to outgoing: inout ProducerBatch, sources: inout [Int32]
    ) {
        var route: (output: String, topic: String)?
        // Elements borrowed from the buffer, not copied out of the array one by one.
        out.records.withUnsafeBufferPointer { records in
            for i in records.indices {
                if route?.output != records[i].output { route = (records[i].output, topic(records[i].output)) }
                outgoing.append(topic: route!.topic, key: records[i].key, value: records[i].value, timestamp: input.timestamp)
                for h in records[i].headers { outgoing.appendHeader(h.name, value: h.value) }
                outgoing.appendHeader(OutputRecord.dedupeKeyHeader, text: records[i].dedupeKey)
                sources.append(source)
            }
        }
        for f in out.failures {
            outgoing.append(deadLetter(DeadLetter(stage: stage, input: input, failure: f), topic: deadLetterTopic))
            sources.append(deadLetterSource)
        }
    }

    /// A dead letter as a record: the original key, value and timestamp, its headers plus `dead-letter.*`.
    static func deadLetter(_ d: DeadLetter, topic: String) -> ProducerRecord {
        ProducerRecord(
            topic: topic, key: d.key, value: d.value,
            headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) },
            timestamp: d.timestamp > 0 ? d.timestamp : nil)
    }
}
