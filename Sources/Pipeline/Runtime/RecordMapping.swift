import Workers
import Kafka

/// The one place Kafka records and stage records convert into each other.
package enum RecordMapping {
    /// A consumed record as a stage sees it. A record without a timestamp gets `now`.
    /// `identifiedByContent`: its topic is declared `dedupe-key: content`.
    package static func input(_ r: ConsumerRecord, now: Int64, identifiedByContent: Bool = false) -> InputRecord {
        withUnsafePointer(to: r) { input($0, now: now, identifiedByContent: identifiedByContent) }
    }

    /// ``input(_:now:)`` of a record read where it lies (the stage loop's batch, in place):
    /// passed as a value from there, the record is copied whole first, a retain and a release of
    /// each of its references per record; through the pointer only the fields the input keeps are.
    package static func input(_ r: UnsafePointer<ConsumerRecord>, now: Int64, identifiedByContent: Bool = false) -> InputRecord {
        InputRecord(
            key: r.pointee.key, sharing: r.pointee.valueBytes,
            headers: r.pointee.headers.isEmpty ? [] : r.pointee.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) },
            timestamp: r.pointee.timestamp ?? now,
            origin: RecordOrigin(topic: r.pointee.topic, partition: r.pointee.partition, offset: r.pointee.offset),
            identifiedByContent: identifiedByContent)
    }

    /// A stage's outputs as records to produce, appended to `batch`: each output with its
    /// headers and its dedupe key as the `dedupe-key` header (none for an output whose topic
    /// `identifiesByContent`: see ``Topology/DedupeKey``), stamped `timestamp(source)` where
    /// `sources[i]` is output `i`'s input. `out`'s buffer is taken: it becomes the batch's when
    /// the batch has none yet (no copy; the runtime's case), else it is copied in after it.
    /// (Taken from the caller's variable: a copy of the output left with the caller would share
    /// the buffer, and the batch's next write would copy all of it.) `topic` maps an output
    /// name to its topic; it and `identifiesByContent` (by topic) are asked once per name.
    package static func append(
        _ out: inout TransformOutput, sources: [Int32], timestamp: (Int32) -> Int64, topic: (String) -> String,
        identifiesByContent: (String) -> Bool = { _ in false }, to batch: inout ProducerBatch
    ) {
        precondition(sources.count == out.count, "one source per output")
        let entries = out.entries, headers = out.headers
        let topicNames = out.outputNames.map(topic)
        let topics = topicNames.map { batch.topicIndex($0) }
        let keyed = topicNames.map { !identifiesByContent($0) }
        let base = batch.adopt(out.takeBytes())
        let dedupeName = batch.write(OutputRecord.dedupeKeyHeader)
        @inline(__always) func moved(_ span: TransformOutput.Span) -> ProducerBatch.Span {
            span.isNone ? .none : ProducerBatch.Span(start: base + span.start, count: span.count)
        }
        for i in entries.indices {
            let e = entries[i]
            batch.append(topic: topics[Int(e.output)], key: moved(e.key), value: moved(e.value), timestamp: timestamp(sources[i]))
            for h in headers[Int(e.firstHeader)..<Int(e.firstHeader + e.headerCount)] {
                batch.appendHeader(name: moved(h.name), value: moved(h.value))
            }
            if keyed[Int(e.output)] { batch.appendHeader(name: dedupeName, value: moved(e.dedupeKey)) }
        }
    }

    /// The dead letters of `failures`, all of `input`, as records to produce.
    package static func deadLetters(
        _ failures: some Collection<DecodeFailure>, of input: InputRecord, stage: String, transform: String, topic: String
    ) -> [ProducerRecord] {
        failures.map { deadLetter(DeadLetter(stage: stage, transform: transform, input: input, failure: $0), topic: topic) }
    }

    /// A dead letter as a record: the original key, value and timestamp, its headers plus `dead-letter.*`.
    static func deadLetter(_ d: DeadLetter, topic: String) -> ProducerRecord {
        ProducerRecord(
            topic: topic, key: d.key, value: d.value,
            headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) },
            timestamp: d.timestamp > 0 ? d.timestamp : nil)
    }

    /// An output that could not be delivered, as a dead letter: the output itself (key, value,
    /// headers, timestamp), `dead-letter.destination.*` naming where it was going, and the input
    /// it came from as its origin. A redrive sends it to its destination.
    static func undelivered(
        output i: Int, of records: ProducerBatch, partition: Int32, origin: RecordOrigin, error: KafkaError, attempts: Int,
        firstFailure: Int64?, stage: String, transform: String, topic: String
    ) -> ProducerRecord {
        let output = records[i]
        let letter = DeadLetter(
            stage: stage, transform: transform,
            undelivered: InputRecord(
                key: output.key, value: output.value,
                headers: output.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) },
                timestamp: output.timestamp ?? 0, origin: origin),
            destination: DeadLetter.Destination(topic: output.topic, partition: partition >= 0 ? partition : output.partition),
            input: origin,
            failure: DecodeFailure(field: "$", reason: .deliveryFailed, detail: "\(error)"),
            errorCode: error.rdKafkaCode.map(String.init) ?? error.code.rawValue, attempts: attempts,
            firstFailure: firstFailure)
        return deadLetter(letter, topic: topic)
    }

    /// An input whose output could not be delivered (one larger than any topic takes), as a
    /// dead letter.
    static func undelivered(
        _ input: InputRecord, error: KafkaError, attempts: Int, firstFailure: Int64?, stage: String, transform: String, topic: String
    ) -> ProducerRecord {
        let letter = DeadLetter(
            stage: stage, transform: transform, input: input,
            failure: DecodeFailure(field: "$", reason: .deliveryFailed, detail: "\(error)"),
            errorCode: error.rdKafkaCode.map(String.init) ?? error.code.rawValue, attempts: attempts,
            firstFailure: firstFailure)
        return deadLetter(letter, topic: topic)
    }
}
