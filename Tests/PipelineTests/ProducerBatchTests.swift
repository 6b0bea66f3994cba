import Testing
@testable import Kafka
@testable import Pipeline
import Workers

/// `ProducerBatch` writes records into one buffer; these read them back without a broker (the
/// mock-cluster tests send every produced record through it to a broker and read it back).
@Suite struct ProducerBatchTests {
    static let records: [ProducerRecord] = [
        ProducerRecord(topic: "a", key: Array("k1".utf8), value: Array("v1".utf8), headers: [KafkaHeader(key: "h", string: "x")], timestamp: 5),
        ProducerRecord(topic: "a", partition: 3, key: nil, value: nil),  // a tombstone without a key
        ProducerRecord(topic: "b", key: [], value: [], headers: [KafkaHeader(key: "null", value: nil), KafkaHeader(key: "", value: [])]),
        ProducerRecord(topic: "a", key: [0, 255, 10], value: Array(repeating: 7, count: 10_000),
                       headers: [KafkaHeader(key: "h", string: "first"), KafkaHeader(key: "h", string: "last")]),
    ]

    @Test func recordsReadBackAsTheyWereWritten() {
        let batch = ProducerBatch(Self.records)
        #expect(batch.count == 4)
        #expect(batch.records == Self.records, "keys, values, null and empty pieces, partitions, timestamps and headers in order")
        #expect(batch.topics == ["a", "b"], "each topic once")
        #expect((0..<4).map { batch.topic($0) } == ["a", "a", "b", "a"])
        #expect(batch.header("h", of: 3) == Array("last".utf8), "the last header of a name, as Kafka's convention has it")
        #expect(batch.header("null", of: 2) == nil)
        #expect(batch.header("", of: 2) == [])
        #expect(batch.header("h", of: 1) == nil)
        #expect(batch.size(3) == 3 + 10_000 + 2 * (1 + 5) - 1 + 64)
    }

    /// The settlement counts delivered outputs per run of one topic, comparing the batch's topic
    /// numbers; a retry's batch numbers its topics afresh, and the counts stay by name.
    @Test func deliveredOutputsAreCountedByTopicAcrossBatchesThatNumberTopicsDifferently() {
        let first = ProducerBatch(Self.records)  // a = 0, b = 1
        let retry = ProducerBatch([Self.records[2], Self.records[0]])  // b = 0, a = 1
        #expect(first.topicNumber(of: 0) == first.topicNumber("a") && retry.topicNumber(of: 1) == retry.topicNumber("a"))
        #expect(first.topicNumber("a") != retry.topicNumber("a"))
        #expect(first.topicNumber("nowhere") == nil)
        var delivered = DeliveredRecords()
        delivered.beginPass()
        for i in 0..<first.count { delivered.output(topicNumber: first.topicNumber(of: i), of: first, at: i) }
        delivered.beginPass()
        for i in 0..<retry.count { delivered.output(topicNumber: retry.topicNumber(of: i), of: retry, at: i) }
        #expect(delivered.outputs == 6)
        #expect(delivered.outputsByTopic.map(\.0) == ["a", "b", "a", "b", "a"])
        #expect(delivered.outputsByTopic.map(\.1) == [2, 1, 1, 1, 1])
    }

    @Test func aRetryCopiesTheChosenRecords() {
        let batch = ProducerBatch(Self.records)
        var again = ProducerBatch()
        again.append(3, of: batch)
        again.append(1, of: batch)
        #expect(again.records == [Self.records[3], Self.records[1]])
    }

    @Test func stageOutputsCarryTheirHeadersAndTheDedupeKeyLast() {
        let input = InputRecord(key: Array("m".utf8), value: Array("{}".utf8), timestamp: 42, origin: RecordOrigin(topic: "in", partition: 0, offset: 9))
        var out = TransformOutput(
            records: [
                OutputRecord(output: "x", key: Array("m".utf8), value: Array("1".utf8), headers: [RecordHeader("user-id", "u")], dedupeKey: "d:1"),
                OutputRecord(output: "y", key: nil, value: nil, dedupeKey: ""),
            ],
            failures: [DecodeFailure(field: "$.price", reason: .invalidValue, detail: "negative")])
        var batch = ProducerBatch()
        let failures = out.failures
        RecordMapping.append(
            &out, sources: [7, 7], timestamp: { $0 == 7 ? input.timestamp : -1 }, topic: { "topic.\($0)" }, to: &batch)
        for d in RecordMapping.deadLetters(failures, of: input, stage: "s", transform: "t", topic: "dlq") { batch.append(d) }
        #expect(batch.records[0] == ProducerRecord(
            topic: "topic.x", key: Array("m".utf8), value: Array("1".utf8),
            headers: [KafkaHeader(key: "user-id", string: "u"), KafkaHeader(key: "dedupe-key", string: "d:1")], timestamp: 42))
        #expect(batch.records[1] == ProducerRecord(
            topic: "topic.y", key: nil, value: nil, headers: [KafkaHeader(key: "dedupe-key", string: "")], timestamp: 42),
            "an empty dedupe key is an empty header value, not a null one")
        #expect(batch.topic(2) == "dlq")
        #expect(batch.header(DeadLetterHeader.reason, of: 2) == Array("invalid-value".utf8))
        #expect(batch.records[2].value == Array("{}".utf8), "a dead letter keeps the input's value")
    }

    /// An output to a topic declared `dedupe-key: content` goes without the header, keeping its
    /// own headers; outputs to other topics of the same batch keep theirs.
    @Test func outputsToATopicIdentifiedByContentCarryNoDedupeKey() {
        var out = TransformOutput(records: [
            OutputRecord(output: "ticks", key: Array("m".utf8), value: Array("1".utf8), headers: [RecordHeader("user-id", "u")], dedupeKey: "t:1"),
            OutputRecord(output: "alerts", key: nil, value: Array("2".utf8), dedupeKey: "a:1"),
            OutputRecord(output: "ticks", key: Array("m".utf8), value: Array("3".utf8), dedupeKey: "t:2"),
        ])
        var batch = ProducerBatch()
        RecordMapping.append(
            &out, sources: [0, 0, 1], timestamp: { 10 + Int64($0) }, topic: { "topic.\($0)" },
            identifiesByContent: { $0 == "topic.ticks" }, to: &batch)
        #expect(batch.records == [
            ProducerRecord(topic: "topic.ticks", key: Array("m".utf8), value: Array("1".utf8), headers: [KafkaHeader(key: "user-id", string: "u")], timestamp: 10),
            ProducerRecord(topic: "topic.alerts", key: nil, value: Array("2".utf8), headers: [KafkaHeader(key: "dedupe-key", string: "a:1")], timestamp: 10),
            ProducerRecord(topic: "topic.ticks", key: Array("m".utf8), value: Array("3".utf8), timestamp: 11),
        ])
        // Records without headers or timestamps of their own are what `rd_kafka_produce_batch` takes in runs.
        #expect(batch.records[2].headers.isEmpty)
    }

    /// The runtime's batch takes the stage's buffer as it is; a batch that already holds records
    /// gets a copy after them, every span moved by where it starts.
    @Test func stageOutputsAfterOtherRecordsKeepTheirBytes() {
        var out = TransformOutput(records: [
            OutputRecord(output: "x", key: Array("m".utf8), value: Array("1".utf8), headers: [RecordHeader("user-id", "u")], dedupeKey: "d:1"),
            OutputRecord(output: "y", key: nil, value: Array("2".utf8), dedupeKey: "d:2"),
        ])
        var batch = ProducerBatch([Self.records[0], Self.records[1]])
        RecordMapping.append(&out, sources: [0, 1], timestamp: { 100 + Int64($0) }, topic: { "topic.\($0)" }, to: &batch)
        #expect(batch.records == [
            Self.records[0], Self.records[1],
            ProducerRecord(
                topic: "topic.x", key: Array("m".utf8), value: Array("1".utf8),
                headers: [KafkaHeader(key: "user-id", string: "u"), KafkaHeader(key: "dedupe-key", string: "d:1")], timestamp: 100),
            ProducerRecord(topic: "topic.y", key: nil, value: Array("2".utf8), headers: [KafkaHeader(key: "dedupe-key", string: "d:2")], timestamp: 101),
        ])
        #expect(out.count == 0 && out.byteCount == 0, "the output's buffer was taken, and its records with it")
    }
}
