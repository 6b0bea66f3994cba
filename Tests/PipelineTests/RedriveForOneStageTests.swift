import Foundation
import Testing
@testable import Pipeline
import PipelineTesting
import Workers
@testable import Kafka
@testable import Operations

/// A redriven input reaches only the stage that failed it: two stages read the same topic, both
/// dead-letter the same garbage, one stage's dead letters are redriven, and only that stage
/// processes them again.
@Suite(.serialized, .timeLimit(.minutes(2))) struct RedriveForOneStageTests {
    static let topology = """
        topics:
          - {name: prices.raw, partitions: 1}
          - {name: ticks-a, partitions: 1}
          - {name: ticks-b, partitions: 1}
          - {name: dlq, partitions: 1}
        stages:
          - {name: stage-a, chain: [prices.decode], inputs: [prices.raw], outputs: {prices.ticks: ticks-a}, dead-letter-topic: dlq}
          - {name: stage-b, chain: [prices.decode], inputs: [prices.raw], outputs: {prices.ticks: ticks-b}, dead-letter-topic: dlq}
        """

    @Test func aRedrivenInputIsProcessedOnlyByTheStageThatFailedIt() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        for t in ["prices.raw", "ticks-a", "ticks-b", "dlq"] { try mock.createTopic(t, partitions: 1) }
        let kafka = KafkaConfiguration(bootstrapServers: [mock.bootstrapServers])
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka))
        var records = (0..<20).map { PriceTicks.tick($0) }
        for i in 0..<3 { records.append(ProducerRecord(topic: "prices.raw", key: Array("bad-\(i)".utf8), value: Array("not json \(i)".utf8))) }
        for i in records.indices { records[i].partition = 0 }
        #expect(try await producer.send(records).allSatisfy { $0.error == nil })

        let topology = try Topology.parse(Self.topology)
        let a = try StageService(definition: try topology.stage(named: "stage-a"), topology: topology, settings: SettlementTests.settings(mock).measured())
        let b = try StageService(definition: try topology.stage(named: "stage-b"), topology: topology, settings: SettlementTests.settings(mock).measured())
        let runA = Task { try await a.run() }
        let runB = Task { try await b.run() }
        try await eventually("both stages settled every input") { a.readings.inputsSettled == 23 && b.readings.inputsSettled == 23 }
        let first = try await SettlementTests.read("dlq", from: mock).compactMap(DeadLetterEntry.init)
        #expect(first.count == 6, "each stage dead-letters the 3 garbage records")
        #expect(Set(first.map(\.letter.stage)) == ["stage-a", "stage-b"])
        #expect(first.allSatisfy { $0.letter.transform == "prices.decode" })

        let ticksOfB = try await SettlementTests.read("ticks-b", from: mock).count
        let ticksOfA = try await SettlementTests.read("ticks-a", from: mock).count
        #expect(ticksOfA == 20 && ticksOfB == 20, "each stage decoded the 20 ticks")

        // Redrive stage-a's dead letters, as `pipelinectl dlq redrive --stage stage-a` does.
        var selection = DeadLetterSelection()
        selection.stages = ["stage-a"]
        let plan = RedrivePlan(first.filter(selection.matches), maxRedrives: 3)
        #expect(plan.sends.count == 3)
        #expect(plan.audiences.map(\.seenBy) == ["stage stage-a only"], "the preview says who sees them again")
        #expect(plan.sends.allSatisfy { $0.headers.contains(KafkaHeader(key: DeadLetterHeader.redriveFor, string: "stage-a")) })
        let (sent, failed) = try await plan.execute(with: producer)
        #expect(sent == 3 && failed.isEmpty)
        await producer.close()

        // Both stages settle the 3 redriven records (their offsets move on); only stage-a
        // processes them: 3 new dead letters, all of stage-a, marked as redriven once.
        try await eventually("both stages settled the redriven inputs") { a.readings.inputsSettled == 26 && b.readings.inputsSettled == 26 }
        let processedByB = b.readings.processed
        #expect(a.readings.processed == 26, "stage-a processed the redriven inputs")
        #expect(processedByB == 23, "stage-b skipped them")
        try await eventually("stage-a's dead letters of the redriven inputs") { try await SettlementTests.read("dlq", from: mock).count == 9 }
        let again = Array(try await SettlementTests.read("dlq", from: mock).compactMap(DeadLetterEntry.init).dropFirst(6))
        #expect(again.map(\.letter.stage) == ["stage-a", "stage-a", "stage-a"], "no dead letter of stage-b: it did not see them")
        #expect(again.allSatisfy { $0.redriveCount == 1 })
        #expect(try await SettlementTests.read("ticks-b", from: mock).count == ticksOfB, "stage-b made nothing more")

        a.requestStop()
        b.requestStop()
        try await runA.value
        try await runB.value
        withExtendedLifetime(mock) {}
    }
}
