import Foundation
import Kafka
import Pipeline
import Testing
@testable import Console
@testable import Operations

/// The message finder on librdkafka's mock cluster: every match counted, the newest shown first,
/// a long value whole one click away.
@Suite struct MessageFinderTests {
    @Test func moreMatchesThanShownAreCountedAndTheNewestComeFirst() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("in", partitions: 2)
        let kafka = KafkaConfiguration(bootstrapServers: [mock.bootstrapServers])
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka))
        // 70 records keyed "k" over two partitions, with rising timestamps, and 5 others.
        let base: Int64 = 1_700_000_000_000
        var records = (0..<70).map { i in
            var r = ProducerRecord(topic: "in", partition: Int32(i % 2), key: Array("k".utf8), value: Array("v\(i)".utf8))
            r.timestamp = base + Int64(i)
            return r
        }
        records += (0..<5).map { ProducerRecord(topic: "in", partition: 0, key: Array("other".utf8), value: Array("o\($0)".utf8)) }
        #expect(try await producer.send(records).allSatisfy { $0.error == nil })
        await producer.close()

        let finder = MessageFinder(kafka: kafka, maxResults: 50)
        let found = try await finder.find(.key("k"), topic: "in", stages: [], deadLetters: [])
        #expect(found.matched == 70, "every match counted, also past the 50 shown")
        #expect(found.messages.count == 50)
        let shown = found.messages.map { String(decoding: $0.record.value ?? [], as: UTF8.self) }
        #expect(shown.first == "v69" && shown.last == "v20", "the newest 50, newest first: \(shown)")

        let pages = ConsolePages(state: ConsoleState(topology: try Topology.parse("topics: [{name: in, partitions: 2}]\nstages: []\n")))
        let page = pages.find(topics: ["in"], request: ["topic": "in", "by": "key", "value": "k"], found: found, scanned: 100_000, error: nil)
        #expect(page.contains("70 found; the newest 50 are shown, newest first"))
        withExtendedLifetime(mock) {}
    }

    @Test func aLongValueIsShortenedWithTheWholeOfItOneClickAway() {
        let value = Array(("{\"a\":\"" + String(repeating: "x", count: 300) + "<b>\"}").utf8)
        let view = ConsolePages.valueView(value)
        #expect(view.contains("<details class=\"full-value\"><summary>the whole value (311 bytes)</summary>"))
        #expect(view.contains(String(repeating: "x", count: 300) + "&lt;b&gt;"), "the whole value, as text")
        #expect(ConsolePages.valueView(Array("short".utf8)) == "short")
        #expect(ConsolePages.valueView(nil) == "(tombstone)")
    }
}

/// The offset-reset page says before the click that a reset is refused.
@Suite struct OffsetResetPageTests {
    @Test func aResetIsRefusedOnThePageWhileWorkersReportThemselvesAlive() throws {
        let topology = try Topology.parse("""
            topics: [{name: in, partitions: 1}, {name: out, partitions: 1}, {name: dlq, partitions: 1}]
            stages:
              - {name: s, chain: [prices.decode], inputs: [in], outputs: {ticks: out}, dead-letter-topic: dlq}
            """)
        let state = ConsoleState(topology: topology)
        let pages = ConsolePages(state: state)
        var row = try #require(state.row("s"))
        let prepared = PreparedOffsetReset(
            group: "s", topic: "in", plan: [OffsetResetPlan(topic: "in", partition: 0, current: 10, target: 0)], members: [], timestamps: [:])
        let request = ["to": "earliest", "topic": "in"]
        // The broker lists no members (tansu does not for an active group), but a worker reports itself alive.
        row.members = 1
        let refused = pages.reset(stage: row, request: request, prepared: prepared, error: nil, csrf: "token", done: false)
        #expect(refused.contains("id=\"refused\"") && refused.contains("1 worker of this stage reports itself alive"))
        #expect(!refused.contains("execute-reset"), "no button that can only be refused")
        row.members = 0
        let offered = pages.reset(stage: row, request: request, prepared: prepared, error: nil, csrf: "token", done: false)
        #expect(offered.contains("execute-reset") && !offered.contains("id=\"refused\""))
    }
}
