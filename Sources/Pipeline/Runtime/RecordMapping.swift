import Workers
import Kafka

/// The one place Kafka records and stage records convert into each other.
package enum RecordMapping {
    /// A consumed record as a stage sees it. A record without a timestamp gets `now`.
    package static func input(_ r: ConsumerRecord, now: Int64) -> InputRecord {
        InputRecord(
            key: r.key, value: r.value,
            headers: r.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) },
            timestamp: r.timestamp ?? now,
            origin: RecordOrigin(topic: r.topic, partition: r.partition, offset: r.offset))
    }

    /// A stage's outputs and dead letters for one input (or an `advance`), as records to produce
    /// with the input's timestamp, appended to `outgoing`. Each output is tagged `source` in
    /// `sources` (its input's index in a delivery), each dead letter `deadLetterSource`. `topic`
    /// maps an output name to its topic; it is asked once per run of the same name.
    @inline(__always)
    package static func append(
        _ out: StageOutput, of input: InputRecord, source: Int32, stage: String, topic: (String) -> String, deadLetterTopic: String,
        deadLetterSource: Int32, to outgoing: inout [ProducerRecord], sources: inout [Int32]
    ) {
        var route: (output: String, topic: String)?
        // Elements borrowed from the buffer, not copied out of the array one by one.
        out.records.withUnsafeBufferPointer { records in
            for i in records.indices {
                if route?.output != records[i].output { route = (records[i].output, topic(records[i].output)) }
                outgoing.append(output(records[i], topic: route!.topic, timestamp: input.timestamp))
                sources.append(source)
            }
        }
        for f in out.failures {
            outgoing.append(deadLetter(DeadLetter(stage: stage, input: input, failure: f), topic: deadLetterTopic))
            sources.append(deadLetterSource)
        }
    }

    /// A stage output as a record to produce, with its dedupe key as a header and the input's time.
    /// The dedupe key goes as the record's ``ProducerRecord/textHeader``: the stage's string
    /// itself, not copied into a header array per record.
    @inline(__always)
    static func output(_ o: OutputRecord, topic: String, timestamp: Int64) -> ProducerRecord {
        ProducerRecord(
            topic: topic, key: o.key, value: o.value, headers: o.headers.isEmpty ? [] : o.headers.map { KafkaHeader(key: $0.name, value: $0.value) },
            textHeader: KafkaTextHeader(key: OutputRecord.dedupeKeyHeader, value: o.dedupeKey), timestamp: timestamp)
    }

    /// A dead letter as a record: the original key, value and timestamp, its headers plus `dead-letter.*`.
    static func deadLetter(_ d: DeadLetter, topic: String) -> ProducerRecord {
        ProducerRecord(
            topic: topic, key: d.key, value: d.value,
            headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) },
            timestamp: d.timestamp > 0 ? d.timestamp : nil)
    }

    /// Approximate memory of a record in flight (for the in-flight byte bound).
    static func size(_ r: ProducerRecord) -> Int {
        (r.key?.count ?? 0) + (r.value?.count ?? 0) + r.headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }
            + (r.textHeader.map { $0.key.utf8.count + $0.value.utf8.count } ?? 0) + 64
    }
}
