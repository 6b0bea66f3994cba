import Foundation
import Testing
@testable import Pipeline
import Workers
@testable import Kafka

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
            // Every stage can be built, and stateful ones have their changelog; a stage that does
            // I/O is built by `pipelinectl worker` (ThumbnailsTests build it from these options).
            let settings = WorkerSettings(bootstrapServers: ["127.0.0.1:1"])
            if stage.chain == ["thumbnails.render"] {
                #expect(stage.options.thumbnails.storeDirectory == "thumbnails")
            }
            if let name = stage.chain.first, TransformCatalog.concurrentNames.contains(name) {
                #expect(throws: TopologyError.self) { try StageService(definition: stage, topology: t, settings: settings) }
                continue
            }
            _ = try StageService(definition: stage, topology: t, settings: settings)
        }
        #expect(t.stages.contains { $0.chain == ["thumbnails.render"] })
        // The push senders: no key in the topology (the environment names the files); APNs' ids.
        let apns = try #require(t.stages.first { $0.chain == ["push.apns"] })
        #expect(apns.options.push.apnsKeyFile == nil && apns.options.push.apnsBundleID != nil && apns.options.push.apnsTeamID != nil)
        #expect(t.stages.contains { $0.chain == ["push.fcm"] && $0.options.push.credentialsFile == nil })
    }

    @Test func thumbnailOptionsAreReadAndCheckedWithTheirLine() throws {
        let yaml = """
            topics:
              - {name: in, partitions: 4}
              - {name: dead, partitions: 1}
            stages:
              - name: thumbs
                chain: [thumbnails.render]
                inputs: [in]
                dead-letter-topic: dead
                concurrency: 8
                options:
                  store-directory: /var/thumbs
                  thumbnail-sizes:
                    - {name: list, width: 160, height: 160, fit: cover}
                    - {name: grid, width: 480, height: 480, format: webp, quality: 70}
                  allow-networks: [10.1.0.0/16]
                  fetch-timeout: 2s
            """
        let t = try Topology.parse(yaml, source: "t.yaml")
        let s = try t.stage(named: "thumbs")
        #expect(s.concurrency == 8)
        #expect(s.options.thumbnails.sizes == [
            ThumbnailOptions.Size(name: "list", width: 160, height: 160, fit: "cover"),
            ThumbnailOptions.Size(name: "grid", width: 480, height: 480, format: "webp", quality: 70),
        ])
        #expect(s.options.thumbnails.allowNetworks == ["10.1.0.0/16"])
        #expect(s.options.thumbnails.fetchTimeoutMillis == 2000)
        let bad = try #require(Self.error(yaml.replacingOccurrences(of: "fit: cover", with: "fit: square")))
        #expect(bad.description == "t.yaml:13: stages[0].options.thumbnail-sizes[0].fit: expected fit or cover, found 'square'")
        let chained = try #require(Self.error(yaml.replacingOccurrences(of: "[thumbnails.render]", with: "[products.decode, thumbnails.render]")))
        #expect(chained.description.contains("thumbnails.render does I/O and runs alone in its stage"))
    }

    /// Each stage declares its option keys and reads them: a key no stage of the chain takes is
    /// refused with the keys the chain does take, and a stage's own error keeps its line and path.
    @Test func optionsBelongToTheStagesThatDeclareThem() throws {
        let notCandles = try #require(Self.error(Self.valid.replacingOccurrences(of: "chain: [prices.decode, prices.candles]", with: "chain: [prices.decode]")))
        #expect(notCandles.description == "t.yaml:22: stages[0].options.candle-lateness: unknown key; prices.decode takes no options")
        let typo = try #require(Self.error(Self.valid.replacingOccurrences(of: "candle-lateness: 2s", with: "candle-latenes: 2s")))
        #expect(typo.message == "unknown key; prices.decode,prices.candles takes: candle-lateness")
        let badDuration = try #require(Self.error(Self.valid.replacingOccurrences(of: "candle-lateness: 2s", with: "candle-lateness: soon")))
        #expect(badDuration.description == "t.yaml:22: stages[0].options.candle-lateness: expected a duration such as 250ms, 2s, 5m or 1h, found 'soon'")
        let alerts = Self.valid.replacingOccurrences(of: "chain: [prices.decode, prices.candles]", with: "chain: [prices.alerts]")
            .replacingOccurrences(of: "options: {candle-lateness: 2s}", with: "options:\n      alerts:\n        - {subscriber: s1, market: KRW-BTC, threshold: 0.05}\n        - {subscriber: s2, market: KRW-ETH}")
        let missing = try #require(Self.error(alerts))
        #expect(missing.description == "t.yaml:25: stages[0].options.alerts[1]: an alert needs subscriber, market and threshold")
        let good = try Topology.parse(alerts.replacingOccurrences(of: "market: KRW-ETH}", with: "market: KRW-ETH, threshold: -0.03}"), source: "t.yaml")
        #expect(try good.stage(named: "prices-candles").options.alerts.map(\.threshold) == [0.05, -0.03])
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

    /// `dedupe-key: content` on a topic: the stages that write to it omit the key (by output
    /// name, mapped or not), the stages that read it identify inputs by content; a wrong value
    /// names the key and what it takes.
    @Test func aTopicCanIdentifyItsRecordsByContent() throws {
        let yaml = Self.valid
            .replacingOccurrences(of: "  - name: prices.raw\n    partitions: 4", with: "  - name: prices.raw\n    partitions: 4\n    dedupe-key: content")
            .replacingOccurrences(of: "  - name: prices.candles\n    partitions: 4", with: "  - name: prices.candles\n    partitions: 4\n    dedupe-key: content")
        let t = try Topology.parse(yaml)
        #expect(t.topic(named: "prices.raw")?.dedupeKey == .content)
        #expect(t.topic(named: "dead-letters")?.dedupeKey == .header, "the default")
        #expect(t.topic(named: "prices.raw")?.config == [:], "not a Kafka config")
        let s = try t.stage(named: "prices-candles")
        #expect(s.identifiesByContent(topic: "prices.raw"))
        #expect(!s.identifiesByContent(topic: "dead-letters"))
        #expect(s.outputsIdentifiedByContent == ["prices.candles.1m", "prices.candles", "prices.raw"])
        #expect(try Topology.parse(Self.valid).stage(named: "prices-candles").outputsIdentifiedByContent.isEmpty)

        let e = try #require(Self.error(yaml.replacingOccurrences(of: "dedupe-key: content", with: "dedupe-key: hash")))
        #expect(e.path == "topics[0].dedupe-key")
        #expect(e.line == 4)
        #expect(e.message == "expected header or content, found 'hash'")

        // The push senders' ledger needs the header.
        let push = try #require(Self.error("""
            topics:
              - {name: notifications.fcm, dedupe-key: content}
              - {name: dead-letters}
            stages:
              - {name: push-fcm, chain: [push.fcm], inputs: [notifications.fcm], dead-letter-topic: dead-letters}
            """))
        #expect(push.path == "stages[0].inputs")
        #expect(push.message == "push.fcm needs each record's dedupe-key header, but 'notifications.fcm' is declared dedupe-key: content")
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

    /// Two stages checkpointing into one changelog topic would read each other's states as their
    /// own (the keys name a lane, and both stages have lanes of the same input partitions).
    @Test func twoStagesCannotShareAChangelog() throws {
        let shared = Self.valid + """

              - name: prices-latest
                chain: [prices.latest]
                inputs: [prices.raw]
                dead-letter-topic: dead-letters
                changelog: prices.candles.changelog
            """
        let e = try #require(Self.error(shared))
        #expect(e.path == "stages[1].changelog", "\(e)")
        #expect(e.message.contains("prices-candles"), "names the other stage: \(e)")
    }

    @Test func aStatefulStageWithoutChangelogIsRefusedAtStart() throws {
        let t = try Topology.parse(Self.valid.replacingOccurrences(of: "    changelog: prices.candles.changelog\n", with: ""))
        #expect(throws: TopologyError.self) {
            _ = try StageService(definition: try t.stage(named: "prices-candles"), topology: t, settings: WorkerSettings(bootstrapServers: ["x:1"]))
        }
    }

    @Test func exactlyOnceAndItsCommitInterval() throws {
        let t = try Topology.parse(Self.valid.replacingOccurrences(of: "    changelog:", with: "    delivery: exactly-once\n    commit-interval: 250ms\n    changelog:"))
        let stage = try t.stage(named: "prices-candles")
        #expect(stage.delivery == .exactlyOnce)
        #expect(stage.commitInterval == .milliseconds(250))
        let e = try #require(Self.error(Self.valid.replacingOccurrences(of: "    changelog:", with: "    delivery: exactly-twice\n    changelog:")))
        #expect(e.path == "stages[0].delivery")
        #expect(e.message.contains("expected at-least-once or exactly-once, found 'exactly-twice'"))
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
