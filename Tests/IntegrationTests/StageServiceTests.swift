import Foundation
import Testing
import Pipeline
import PipelineTesting
import Workers
import Kafka
import Operations

/// A real stage on the real local broker: good records come out decoded, bad ones go to the
/// dead-letter topic with their origin, and the worker keeps going.
@Suite(.timeLimit(.minutes(2))) struct StageServiceTests {
    static let tick = """
        {"type":"ticker","code":"KRW-XRP","opening_price":815.0,"high_price":820,"low_price":810.0,"trade_price":812.0,\
        "prev_closing_price":815,"change":"FALL","change_price":3.0,"change_rate":0.0036,"signed_change_price":-3.0,\
        "signed_change_rate":-0.0042,"trade_volume":1.5e+03,"acc_trade_volume":1000.5,"acc_trade_volume_24h":2000.25,\
        "acc_trade_price":812000.0,"acc_trade_price_24h":1624000.00000000,"trade_date":"20231114","trade_time":"031206",\
        "trade_timestamp":1700000000123,"ask_bid":"ASK","timestamp":1700000000150,"delisting_date":null,"stream_type":"REALTIME"}
        """

    @Test func decodeFailuresGoToTheDeadLetterTopicAndTheWorkerKeepsGoing() async throws {
        try await LocalBroker.with { broker in
            let servers = [broker.bootstrapServers]
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: servers))
            for topic in ["prices.raw", "prices.ticks", "prices.dead-letters"] {
                try await admin.createTopic(TopicSpec(name: topic, partitions: 2))
            }
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: servers))
            // 30 records, every third one broken in a different way.
            let broken = ["{\"type\":\"ticker\",", "[1,2,3]", "{\"type\":\"ticker\",\"code\":\"KRW-XRP\",\"trade_price\":-5}"]
            let inputs = (0..<30).map { i in
                ProducerRecord(
                    topic: "prices.raw", key: Array("m\(i)".utf8),
                    value: Array((i % 3 == 2 ? broken[(i / 3) % 3] : Self.tick).utf8),
                    headers: [KafkaHeader(key: "source", string: "upbit")])
            }
            let sent = try await producer.send(inputs)
            #expect(sent.allSatisfy { $0.error == nil })

            let topology = try Topology.parse("""
                topics:
                  - {name: prices.raw, partitions: 2}
                  - {name: prices.ticks, partitions: 2}
                  - {name: prices.dead-letters, partitions: 2}
                stages:
                  - name: decoder
                    chain: [prices.decode]
                    inputs: [prices.raw]
                    dead-letter-topic: prices.dead-letters
                """)
            var settings = WorkerSettings(bootstrapServers: servers)
            settings.sessionTimeout = .milliseconds(2000)
            settings.heartbeatInterval = .milliseconds(300)
            settings.stopAfterInputs = 30
            let service = try StageService(definition: try topology.stage(named: "decoder"), topology: topology, settings: settings.measured())
            try await service.run()
            #expect(service.readings.inputsSettled == 30)
            #expect(service.readings.produced == 20)
            #expect(service.readings.deadLettered == 10)

            // Read both output topics back.
            let readConfig = { (group: String) in
                var c = ConsumerConfiguration(bootstrapServers: servers, groupID: group)
                c.sessionTimeout = .milliseconds(2000)
                c.heartbeatInterval = .milliseconds(300)
                return c
            }
            func read(_ topic: String, count: Int) async throws -> [ConsumerRecord] {
                let reader = try KafkaConsumer(configuration: readConfig("read-\(topic)"))
                try reader.subscribe([topic])
                var records: [ConsumerRecord] = []
                for try await event in reader {
                    if case .records(let batch) = event { records += batch }
                    if records.count >= count { break }
                }
                try await reader.close()
                return records
            }
            let ticks = try await read("prices.ticks", count: 20)
            #expect(ticks.count == 20)
            #expect(ticks.allSatisfy { $0.header("dedupe-key") != nil })

            let dead = try await read("prices.dead-letters", count: 10)
            #expect(dead.count == 10)
            let offsetsBySource = Dictionary(uniqueKeysWithValues: zip(inputs.map { String(decoding: $0.key!, as: UTF8.self) }, sent))
            for letter in dead {
                let key = String(decoding: letter.key!, as: UTF8.self)
                let original = try #require(inputs.first { $0.key == letter.key })
                #expect(letter.value == original.value, "the original bytes are kept")
                #expect(letter.header("source") == Array("upbit".utf8), "and the original headers")
                #expect(letter.header(DeadLetterHeader.stage) == Array("decoder".utf8), "the stage, as operators see it")
                #expect(letter.header(DeadLetterHeader.transform) == Array("prices.decode".utf8))
                #expect(letter.header(DeadLetterHeader.originTopic) == Array("prices.raw".utf8))
                let report = try #require(offsetsBySource[key])
                #expect(letter.header(DeadLetterHeader.originPartition) == Array(String(report.partition).utf8))
                #expect(letter.header(DeadLetterHeader.originOffset) == Array(String(report.offset).utf8))
                #expect(!(letter.header(DeadLetterHeader.reason) ?? []).isEmpty)
                #expect(!(letter.header(DeadLetterHeader.field) ?? []).isEmpty)
            }
            let committed = try await admin.committedOffsets(group: "decoder")
            #expect(committed.reduce(0) { $0 + $1.offset } == 30, "every input committed once")
            await producer.close()
        }
    }

    /// A stateful stage's checkpoint is durable up to its offset; when the previous owner stopped
    /// between the checkpoint and the commit, the next owner skips the inputs the state already
    /// holds and must still commit past them (it once re-read them forever without committing).
    @Test func aRestoredCheckpointAheadOfTheCommitIsCommitted() async throws {
        try await LocalBroker.with { broker in
            let servers = [broker.bootstrapServers]
            let topology = try Topology.parse("""
                topics:
                  - {name: prices.raw, partitions: 1}
                  - {name: prices.candles, partitions: 1}
                  - {name: candles.changelog, partitions: 1, config: {cleanup.policy: compact}}
                  - {name: dead-letters, partitions: 1}
                stages:
                  - name: candles
                    chain: [prices.candles]
                    inputs: [prices.raw]
                    dead-letter-topic: dead-letters
                    changelog: candles.changelog
                """)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: servers))
            _ = try await topology.apply(using: admin)
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: servers))
            _ = try await producer.send((0..<10).map { _ in ProducerRecord(topic: "prices.raw", key: Array("KRW-XRP".utf8), value: Array(Self.tick.utf8)) })
            await producer.close()
            var settings = WorkerSettings(bootstrapServers: servers)
            settings.sessionTimeout = .milliseconds(2000)
            settings.heartbeatInterval = .milliseconds(300)
            settings.stopAfterInputs = 10
            let definition = try topology.stage(named: "candles")
            let first = try StageService(definition: definition, topology: topology, settings: settings.measured())
            try await first.run()
            let tp = TopicPartition("prices.raw", 0)
            #expect(try await admin.committedOffsets(group: "candles", partitions: [tp]).first?.offset == 10)

            // The commit after the checkpoint never happened.
            try await admin.alterCommittedOffsets(group: "candles", offsets: [TopicPartitionOffset("prices.raw", 0, offset: 4)])
            settings.stopAfterInputs = nil
            let second = try StageService(definition: definition, topology: topology, settings: settings.measured())
            let running = Task { try await second.run() }
            var committed: Int64 = -1
            try? await eventually("the restored offset committed") {
                committed = try await admin.committedOffsets(group: "candles", partitions: [tp]).first?.offset ?? -1
                return committed == 10
            }
            second.requestStop()
            try await running.value
            #expect(committed == 10, "the restored checkpoint's offset is committed")
            #expect(second.readings.restoredPartitions == 1)
            #expect(second.readings.processed == 0, "inputs the state already holds are skipped")
            await admin.close()
        }
    }

    /// A stateful stage with two co-partitioned inputs keeps one state per partition number across
    /// them: every product meets its thumbnail, whichever partition they hash to, and a restart
    /// restores each joined lane with the offsets of both topics.
    @Test func aStatefulStageJoinsItsCoPartitionedInputs() async throws {
        try await LocalBroker.with { broker in
            let servers = [broker.bootstrapServers]
            let topology = try Topology.parse("""
                topics:
                  - {name: products.raw, partitions: 3}
                  - {name: thumbnails.ready, partitions: 3}
                  - {name: notifications, partitions: 1}
                  - {name: news.changelog, partitions: 3, config: {cleanup.policy: compact}}
                  - {name: dead-letters, partitions: 1}
                stages:
                  - name: news
                    chain: [products.new-notifications]
                    inputs: [products.raw, thumbnails.ready]
                    dead-letter-topic: dead-letters
                    changelog: news.changelog
                    advance-interval: 200ms
                    options: {new-products-interval: 2s}
                """)
            #expect(try topology.stage(named: "news").joinsInputs)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: servers))
            _ = try await topology.apply(using: admin)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let ids = 1...9
            var records: [ProducerRecord] = []
            for id in ids {
                let product = #"{"id":\#(id),"vendor_id":29,"vendorName":"v","name":"Product \#(id)","thumbnail":"http://img/\#(id)-thumb.jpg","currency":"KRW","price":1000,"bargain_price":1000,"discounted_price":0,"stock":1,"created_at":"2022-10-18T14:00:39","issued_at":"2022-10-18T14:00:39"}"#
                records.append(ProducerRecord(
                    topic: "products.raw", key: Array("\(id)".utf8), value: Array(product.utf8),
                    headers: [KafkaHeader(key: "category", string: "c\(id)"), KafkaHeader(key: "event-type", string: "created")], timestamp: now))
                let ready = #"{"owner":"product","owner_id":"\#(id)","image_index":0,"thumbnails":[{"name":"list","uri":"file:///t/\#(id)-list.jpg"}]}"#
                records.append(ProducerRecord(topic: "thumbnails.ready", key: Array("\(id)".utf8), value: Array(ready.utf8), timestamp: now + 100))
            }
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: servers))
            let sent = try await producer.send(records)
            #expect(sent.allSatisfy { $0.error == nil })
            #expect(Set(sent.map(\.partition)).count == 3, "the keys spread over the partitions")
            await producer.close()

            var settings = WorkerSettings(bootstrapServers: servers)
            settings.sessionTimeout = .milliseconds(2000)
            settings.heartbeatInterval = .milliseconds(300)
            let definition = try topology.stage(named: "news")
            let first = try StageService(definition: definition, topology: topology, settings: settings.measured())
            let running = Task { try await first.run() }
            // Every window closes (2 s on the wall clock after the records' time): one
            // notification per product, each with its own product's thumbnail.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(60)
            var notifications: [ConsumerRecord] = []
            while clock.now < deadline {
                var read: [ConsumerRecord] = []
                try await TopicReader(kafka: KafkaConfiguration(bootstrapServers: servers))
                    .read(from: [TopicPartitionOffset("notifications", 0, offset: TopicPartitionOffset.beginning)]) { batch in
                        read += batch
                        return true
                    }
                notifications = read
                if notifications.count >= ids.count { break }
                try await Task.sleep(for: .milliseconds(300))
            }
            first.requestStop()
            try await running.value
            #expect(notifications.count == ids.count)
            for id in ids {
                let text = notifications.map { String(decoding: $0.value ?? [], as: UTF8.self) }.filter { $0.contains(#""topic":"new-products-c\#(id)""#) }
                #expect(text.count == 1, "product \(id): \(text)")
                #expect(text.first?.contains(#""image":"file:///t/\#(id)-list.jpg""#) == true, "product \(id) carries its thumbnail: \(text)")
            }
            var committed = try await admin.committedOffsets(group: "news")
            #expect(committed.filter { $0.topic == "products.raw" }.reduce(0) { $0 + $1.offset } == Int64(ids.count))
            #expect(committed.filter { $0.topic == "thumbnails.ready" }.reduce(0) { $0 + $1.offset } == Int64(ids.count))

            // A restart restores the three joined lanes and reprocesses nothing.
            try await admin.alterCommittedOffsets(group: "news", offsets: committed.map { TopicPartitionOffset($0.topic, $0.partition, offset: 0) })
            let second = try StageService(definition: definition, topology: topology, settings: settings.measured())
            let again = Task { try await second.run() }
            try? await eventually("the restored offsets committed") {
                committed = try await admin.committedOffsets(group: "news")
                return committed.reduce(0, { $0 + $1.offset }) == Int64(2 * ids.count)
            }
            second.requestStop()
            try await again.value
            #expect(second.readings.restoredPartitions == 3, "three lanes, each across both topics")
            #expect(second.readings.processed == 0, "everything is in the restored state")
            #expect(committed.reduce(0) { $0 + $1.offset } == Int64(2 * ids.count), "the restored offsets of both topics are committed")
            await admin.close()
        }
    }
}
