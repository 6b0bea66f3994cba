import Foundation
import Testing
@testable import Pipeline
import Workers

/// The topology file: what it accepts, and errors that name the line, the key and what was expected.
@Suite struct TopologyTests {
    static let valid = """
        topics:
          - name: prices.raw
            partitions: 4
          - name: prices.candles
            partitions: 4
          - name: prices.candles.changelog
            partitions: 4
            config: {cleanup.policy: compact}
          - name: dead-letters
            partitions: 1
            config: {retention.ms: "604800000"}
        stages:
          - name: prices-candles
            chain: [prices.decode, prices.candles]
            inputs: [prices.raw]
            outputs:
              prices.candles.1m: prices.candles
            dead-letter-topic: dead-letters
            changelog: prices.candles.changelog
            retry: {attempts: 3, initial-backoff: 100ms, max-backoff: 5s}
            advance-interval: 500ms
            options: {candle-lateness: 2s}
        """

    @Test func readsTopicsAndStages() throws {
        let t = try Topology.parse(Self.valid)
        #expect(t.topics.map(\.name) == ["prices.raw", "prices.candles", "prices.candles.changelog", "dead-letters"])
        #expect(t.topic(named: "prices.candles.changelog")?.config == ["cleanup.policy": "compact"])
        let s = try t.stage(named: "prices-candles")
        #expect(s.chain == ["prices.decode", "prices.candles"])
        #expect(s.group == "prices-candles", "the group defaults to the stage name")
        #expect(s.topic(forOutput: "prices.candles.1m") == "prices.candles")
        #expect(s.topic(forOutput: "prices.ticks") == "prices.ticks", "unmapped outputs go to the topic of their name")
        #expect(s.retry.attempts == 3)
        #expect(s.retry.backoff(beforeAttempt: 2) == .milliseconds(100))
        #expect(s.retry.backoff(beforeAttempt: 4) == .milliseconds(400))
        #expect(s.retry.backoff(beforeAttempt: 30) == .seconds(5))
        #expect(s.advanceInterval == .milliseconds(500))
        #expect(s.options.candleLatenessMillis == 2000)
        #expect(s.delivery == .atLeastOnce)
    }

    @Test func theShippedTopologyIsValid() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let t = try Topology.load(path: root.appendingPathComponent("topology.yaml").path)
        #expect(t.stages.count >= 5)
        for stage in t.stages {
            // Every stage can be built, and stateful ones have their changelog.
            let settings = WorkerSettings(bootstrapServers: ["127.0.0.1:1"])
            _ = try StageService(definition: stage, topology: t, settings: settings)
        }
    }

    static func error(_ yaml: String) -> TopologyError? {
        do {
            _ = try Topology.parse(yaml, source: "t.yaml")
            return nil
        } catch {
            return error
        }
    }

    @Test func anUnknownKeyIsNamedWithItsLine() throws {
        let bad = Self.valid.replacingOccurrences(of: "    advance-interval: 500ms", with: "    advance-intervall: 500ms")
        let e = try #require(Self.error(bad))
        #expect(e.line == 21)
        #expect(e.path == "stages[0].advance-intervall")
        #expect(e.description.hasPrefix("t.yaml:21: stages[0].advance-intervall: unknown key; expected one of: name, chain"))
    }

    @Test func aWrongValueSaysWhatWasExpected() throws {
        let e = try #require(Self.error(Self.valid.replacingOccurrences(of: "attempts: 3", with: "attempts: three")))
        #expect(e.line == 20)
        #expect(e.path == "stages[0].retry.attempts")
        #expect(e.message == "expected an integer of at least 1, found 'three'")

        let d = try #require(Self.error(Self.valid.replacingOccurrences(of: "500ms", with: "soon")))
        #expect(d.path == "stages[0].advance-interval")
        #expect(d.message.contains("expected a duration such as 250ms"))
    }

    @Test func danglingNamesAreRejected() throws {
        let topic = try #require(Self.error(Self.valid.replacingOccurrences(of: "inputs: [prices.raw]", with: "inputs: [prices.rwa]")))
        #expect(topic.path == "stages[0].inputs[0]")
        #expect(topic.message == "topic 'prices.rwa' is not among the topology's topics")

        let stage = try #require(Self.error(Self.valid.replacingOccurrences(of: "prices.decode, prices.candles]", with: "prices.decode, prices.candle]")))
        #expect(stage.path == "stages[0].chain[1]")
        #expect(stage.message.hasPrefix("unknown stage 'prices.candle'; known stages:"))
    }

    @Test func aChangelogMustBeCompacted() throws {
        let e = try #require(Self.error(Self.valid.replacingOccurrences(of: "config: {cleanup.policy: compact}", with: "config: {cleanup.policy: delete}")))
        #expect(e.path == "stages[0].changelog")
        #expect(e.message.contains("cleanup.policy: compact"))
    }

    @Test func aStatefulStageWithoutChangelogIsRefusedAtStart() throws {
        let t = try Topology.parse(Self.valid.replacingOccurrences(of: "    changelog: prices.candles.changelog\n", with: ""))
        #expect(throws: TopologyError.self) {
            _ = try StageService(definition: try t.stage(named: "prices-candles"), topology: t, settings: WorkerSettings(bootstrapServers: ["x:1"]))
        }
    }

    @Test func exactlyOnceIsRefusedWithAReason() throws {
        let e = try #require(Self.error(Self.valid.replacingOccurrences(of: "    changelog:", with: "    delivery: exactly-once\n    changelog:")))
        #expect(e.path == "stages[0].delivery")
        #expect(e.message.contains("not available yet"))
    }

    @Test func notYAMLAtAll() throws {
        let e = try #require(Self.error("topics: [\n  - oops"))
        #expect(e.message.hasPrefix("not valid YAML"))
    }

    @Test func durations() {
        #expect(parseDuration("250ms") == .milliseconds(250))
        #expect(parseDuration("2s") == .seconds(2))
        #expect(parseDuration("5m") == .seconds(300))
        #expect(parseDuration("1h") == .seconds(3600))
        #expect(parseDuration("7") == .seconds(7))
        #expect(parseDuration("-1s") == nil)
        #expect(parseDuration("fast") == nil)
    }
}
