import Foundation
import Testing
import PipelineTesting
@testable import Kafka

/// Producer and consumer against librdkafka's in-process mock cluster (no broker process).
@Suite(.timeLimit(.minutes(2))) struct MockClusterTests {
    static func consumerConfig(_ bootstrap: String, group: String) -> ConsumerConfiguration {
        var config = ConsumerConfiguration(bootstrapServers: [bootstrap], groupID: group)
        config.sessionTimeout = .milliseconds(6000)
        config.heartbeatInterval = .milliseconds(500)
        config.reportEndOfPartition = true
        return config
    }

    /// Reads a whole topic through a consumer group until every partition reported its end and
    /// `expected` records arrived.
    static func readAll(_ bootstrap: String, topic: String, partitions: Int, expected: Int) async throws -> [ConsumerRecord] {
        let consumer = try KafkaConsumer(configuration: consumerConfig(bootstrap, group: "reader-\(UUID())"))
        try consumer.subscribe([topic])
        var records: [ConsumerRecord] = []
        var ended = Set<Int32>()
        for try await event in consumer {
            switch event {
            case .records(let batch):
                records += batch
                for r in batch { ended.remove(r.partition) }
                try consumer.store(batch)
            case .endOfPartition(let end):
                ended.insert(end.partition)
            case .assigned, .revoked, .lost:
                break
            }
            if ended.count == partitions && records.count >= expected { break }
        }
        try await consumer.close()
        return records
    }

    @Test func roundTripKeepsKeyValueHeadersTimestampAndTombstones() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("roundtrip", partitions: 3)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        var records = (0..<999).map { i in
            ProducerRecord(
                topic: "roundtrip", key: Array("k\(i % 10)".utf8), value: Array("v\(i)".utf8),
                headers: [KafkaHeader(key: "seq", string: "\(i)"), KafkaHeader(key: "empty", value: nil)],
                timestamp: 1_700_000_000_000 + Int64(i))
        }
        records.append(ProducerRecord(topic: "roundtrip", key: Array("gone".utf8), value: nil))
        let reports = try await producer.send(records)
        #expect(reports.allSatisfy { $0.error == nil && $0.offset >= 0 })
        await producer.close()

        let received = try await Self.readAll(mock.bootstrapServers, topic: "roundtrip", partitions: 3, expected: 1000)
        #expect(received.count == 1000)
        let byValue = Dictionary(uniqueKeysWithValues: received.compactMap { r in r.value.map { (String(decoding: $0, as: UTF8.self), r) } })
        let r7 = try #require(byValue["v7"])
        #expect(r7.key == Array("k7".utf8))
        #expect(r7.header("seq") == Array("7".utf8))
        #expect(r7.headers.contains(KafkaHeader(key: "empty", value: nil)))
        #expect(r7.timestamp == 1_700_000_000_007)
        let tombstone = try #require(received.first { $0.key == Array("gone".utf8) })
        #expect(tombstone.value == nil)
        // Every value exactly once, each with its own record's header and key (values arrive
        // as slices of one buffer per drain of librdkafka's queue: an off-by-one would shift them).
        #expect(Set(byValue.keys) == Set((0..<999).map { "v\($0)" }))
        for (value, r) in byValue {
            let i = Int(value.dropFirst())!
            #expect(r.header("seq") == Array("\(i)".utf8), "\(value)")
            #expect(r.key == Array("k\(i % 10)".utf8), "\(value)")
        }
        // Same key, same partition, in send order.
        for key in 0..<10 {
            let seqs = received.filter { $0.key == Array("k\(key)".utf8) }.map { Int(String(decoding: $0.header("seq")!, as: UTF8.self))! }
            #expect(seqs == seqs.sorted())
            #expect(Set(received.filter { $0.key == Array("k\(key)".utf8) }.map(\.partition)).count == 1)
        }
    }

    /// Records without headers or a timestamp of their own go into librdkafka a run at a time
    /// (`rd_kafka_produce_batch`), the others one by one. Mixed across two topics, with explicit
    /// partitions, null and empty keys and values among them, and a local queue smaller than the
    /// batch (runs stop at a full queue and the rest waits for room): every record arrives once
    /// with its own pieces, in send order per partition, where its report says it went, stamped
    /// with its own timestamp or the send time.
    @Test func runsOfPlainRecordsKeepEachRecordsPiecesOrderAndReport() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("runs.a", partitions: 3)
        try mock.createTopic("runs.b", partitions: 2)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.maxQueuedMessages = 700
        let producer = try KafkaProducer(configuration: config)
        let count = 3000
        func key(_ i: Int) -> [UInt8]? { i % 17 == 0 ? nil : i % 23 == 0 ? [] : Array("k\(i)".utf8) }
        func value(_ i: Int) -> [UInt8]? {
            guard key(i)?.first != nil else { return Array("v\(i)".utf8) }  // the value names the record
            return i % 13 == 0 ? nil : i % 19 == 0 ? [] : Array("v\(i)".utf8)
        }
        func topic(_ i: Int) -> String { (i / 400) % 2 == 0 ? "runs.a" : "runs.b" }
        func identity(_ key: [UInt8]?, _ value: [UInt8]?) -> Int? {
            if let key, key.first == UInt8(ascii: "k") { return Int(String(decoding: key.dropFirst(), as: UTF8.self)) }
            return value.flatMap { Int(String(decoding: $0.dropFirst(), as: UTF8.self)) }
        }
        var batch = ProducerBatch()
        for i in 0..<count {
            let partitions: Int32 = topic(i) == "runs.a" ? 3 : 2
            batch.append(
                topic: topic(i), partition: i % 11 == 0 ? Int32(i) % partitions : nil, key: key(i), value: value(i),
                timestamp: i % 97 == 0 ? 1_600_000_000_000 + Int64(i) : nil)
            if i % 50 == 49 { batch.appendHeader("seq", text: "\(i)") }
        }
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let reports = try await producer.submit(batch).reports()
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        await producer.close()
        #expect(reports.count == count)
        #expect(reports.allSatisfy { $0.error == nil && $0.offset >= 0 })

        var received = try await Self.readAll(mock.bootstrapServers, topic: "runs.a", partitions: 3, expected: 1600)
        received += try await Self.readAll(mock.bootstrapServers, topic: "runs.b", partitions: 2, expected: 1400)
        #expect(received.count == count)
        var seen = Set<Int>()
        for r in received {
            let i = try #require(identity(r.key, r.value), "a record that names itself")
            #expect(seen.insert(i).inserted, "record \(i) once")
            #expect(r.topic == topic(i) && r.key == key(i) && r.value == value(i), "record \(i)'s own pieces")
            #expect(r.partition == reports[i].partition && r.offset == reports[i].offset, "record \(i) where its report says")
            if i % 11 == 0 { #expect(r.partition == Int32(i) % (topic(i) == "runs.a" ? 3 : 2), "record \(i) in the partition it asked for") }
            #expect(r.headers == (i % 50 == 49 ? [KafkaHeader(key: "seq", string: "\(i)")] : []), "record \(i)'s headers")
            if i % 97 == 0 {
                #expect(r.timestamp == 1_600_000_000_000 + Int64(i))
            } else {
                #expect((before - 1000...after + 1000).contains(r.timestamp ?? 0), "record \(i) stamped when sent")
            }
        }
        for t in ["runs.a", "runs.b"] {
            for p in Int32(0)..<3 {
                let order = received.filter { $0.topic == t && $0.partition == p }.sorted { $0.offset < $1.offset }.compactMap { identity($0.key, $0.value) }
                #expect(order == order.sorted(), "\(t)/\(p) in send order")
            }
        }
    }

    /// The consumer skips librdkafka's header parsing when the byte after a v2 record's value
    /// says there are none: records with and without headers, empty and null values, mixed in
    /// one partition (so in the same fetched batches), must each come back with exactly their own.
    /// Compressed batches are read from a decompressed copy: the same must hold there.
    @Test(arguments: [ProducerConfiguration.Compression.none, .gzip, .snappy, .lz4, .zstd])
    func headersSurviveMixedWithRecordsWithoutThem(compression: ProducerConfiguration.Compression) async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("mixed", partitions: 1)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.compression = compression
        let producer = try KafkaProducer(configuration: config)
        let shapes: [(value: [UInt8]?, headers: [KafkaHeader])] = [
            (Array("plain".utf8), []),
            (Array("with".utf8), [KafkaHeader(key: "h", string: "1")]),
            ([], [KafkaHeader(key: "h", string: "empty value")]),
            ([], []),
            (nil, [KafkaHeader(key: "h", string: "tombstone")]),
            (nil, []),
            ([0], [KafkaHeader(key: "zero", value: nil)]),
            ([0], []),
            (Array("two".utf8), [KafkaHeader(key: "a", value: []), KafkaHeader(key: "b", string: "2")]),
        ]
        let records = (0..<900).map { i in
            let shape = shapes[i % shapes.count]
            return ProducerRecord(topic: "mixed", key: Array("\(i)".utf8), value: shape.value, headers: shape.headers)
        }
        let reports = try await producer.send(records)
        #expect(reports.allSatisfy { $0.error == nil })
        await producer.close()

        let received = try await Self.readAll(mock.bootstrapServers, topic: "mixed", partitions: 1, expected: records.count)
        #expect(received.count == records.count)
        for r in received {
            let i = try #require(Int(String(decoding: r.key ?? [], as: UTF8.self)))
            let shape = shapes[i % shapes.count]
            #expect(r.value == shape.value, "record \(i)")
            #expect(r.headers == shape.headers, "record \(i)")
        }
    }

    @Test func brokerDownMidProduceLosesAndDuplicatesNothing() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("outage", partitions: 2)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.messageTimeout = .seconds(60)
        config.linger = .milliseconds(5)
        let producer = try KafkaProducer(configuration: config)
        let total = 20_000
        let firstHalf = (0..<total / 2).map { ProducerRecord(topic: "outage", key: Array("\($0 % 7)".utf8), value: Array("\($0)".utf8)) }
        let secondHalf = (total / 2..<total).map { ProducerRecord(topic: "outage", key: Array("\($0 % 7)".utf8), value: Array("\($0)".utf8)) }

        // Half is in flight when the broker goes down; the rest is sent while it is down.
        async let first = producer.send(firstHalf)
        mock.setBrokerDown(1)
        async let second = producer.send(secondHalf)
        // Keep the broker away long enough for requests to fail and be retried.
        try await Task.sleep(for: .milliseconds(800))
        mock.setBrokerUp(1)
        let reports = try await first + second
        await producer.close()
        #expect(reports.filter { $0.error != nil }.isEmpty, "every message is delivered")

        let received = try await Self.readAll(mock.bootstrapServers, topic: "outage", partitions: 2, expected: total)
        let values = received.map { Int(String(decoding: $0.value!, as: UTF8.self))! }
        #expect(values.count == total, "no duplicates, none lost")
        #expect(Set(values).count == total)
        // The log itself has no duplicates either: high watermarks add up to the total (the mock's are exact).
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [mock.bootstrapServers]))
        var sum: Int64 = 0
        for p in 0..<2 { sum += try await admin.watermarks(TopicPartition("outage", Int32(p))).high }
        #expect(sum == Int64(total))
    }

    @Test func lostProduceResponsesAreNotDuplicated() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("retries", partitions: 1)
        // The broker fails the next Produce requests with retriable errors: librdkafka retries them.
        mock.pushRequestErrors(apiKey: 0, errorCodes: [7 /* REQUEST_TIMED_OUT */, 6 /* NOT_LEADER */, 7])
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        let reports = try await producer.send((0..<500).map { ProducerRecord(topic: "retries", value: Array("\($0)".utf8)) })
        await producer.close()
        #expect(reports.allSatisfy { $0.error == nil })
        #expect(reports.map(\.offset) == Array(0..<500).map(Int64.init), "in order, each once")
    }

    @Test func enqueueReportsOnTheStream() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("fire", partitions: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        var ids: Set<UInt64> = []
        for i in 0..<100 { ids.insert(try await producer.enqueue(ProducerRecord(topic: "fire", value: Array("\(i)".utf8)))) }
        var reported: Set<UInt64> = []
        for await batch in producer.deliveryReports {
            for r in batch {
                #expect(r.error == nil)
                reported.insert(r.id)
            }
            if reported.count == 100 { break }
        }
        #expect(reported == ids)
        await producer.close()
    }

    @Test func sendAfterCloseFails() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]))
        await producer.close()
        let error = await #expect(throws: KafkaError.self) { try await producer.send(ProducerRecord(topic: "t", value: [1])) }
        #expect(error?.code == .closed)
    }

    @Test func deliveryToUnknownPartitionFailsWithTypedError() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("small", partitions: 1)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.messageTimeout = .seconds(2)
        let producer = try KafkaProducer(configuration: config)
        let error = await #expect(throws: KafkaError.self) {
            try await producer.send(ProducerRecord(topic: "small", partition: 5, value: [1]))
        }
        #expect(error?.rdKafkaCode != nil)
        // The same inside a run of plain records (one rd_kafka_produce_batch call): only that
        // record fails, its neighbours are delivered.
        let reports = try await producer.send([
            ProducerRecord(topic: "small", value: [1]), ProducerRecord(topic: "small", partition: 5, value: [2]),
            ProducerRecord(topic: "small", partition: 0, value: [3]),
        ])
        #expect(reports[0].error == nil && reports[2].error == nil)
        #expect(reports[1].error?.rdKafkaCode != nil)
        await producer.close()
    }
}
