import Foundation
import Workers
import Yams
import Kafka

/// The pipeline's declarative description: its topics and its stages (one consumer group each).
///
/// Read from YAML (``load(path:)``); the project ships `topology.yaml`. Every key is checked: an
/// unknown key, a wrong type or a dangling topic name fails with the file, line and key.
public struct Topology: Sendable {
    public struct Topic: Sendable, Hashable {
        public var name: String
        public var partitions: Int
        public var replicationFactor: Int
        /// Topic configs (`cleanup.policy`, `retention.ms`, …) as Kafka names them.
        public var config: [String: String]
        /// How its records carry their dedupe keys (`dedupe-key:`; not a Kafka config).
        public var dedupeKey: DedupeKey = .header
    }

    /// How a topic's records carry their dedupe keys (docs/guarantees.md, "Dedupe keys").
    public enum DedupeKey: String, Sendable, Hashable {
        /// Each record carries the key its stage gave it, as the `dedupe-key` header (the default).
        case header
        /// A record is identified by its content: equal key and value make the same record. No
        /// header is sent (librdkafka's header list per record is about an eighth of a
        /// `prices.decode` worker's CPU); a consumer derives the key from the record
        /// (``Workers/OutputRecord/contentDedupeKey(key:value:)``). For topics of facts, where
        /// two equal records are the same fact: ticks.
        case content
    }

    public enum Delivery: String, Sendable {
        case atLeastOnce = "at-least-once"
        case exactlyOnce = "exactly-once"
    }

    public struct RetryPolicy: Sendable, Hashable {
        /// Attempts per output batch before its inputs go to the dead-letter topic (1 = no retry).
        public var attempts: Int = 5
        public var initialBackoff: Duration = .milliseconds(200)
        public var maxBackoff: Duration = .seconds(10)
        public init() {}

        /// The wait before attempt `n` (n ≥ 2): initial × 2^(n-2), capped.
        public func backoff(beforeAttempt n: Int) -> Duration {
            var d = initialBackoff
            if n > 2 { for _ in 2..<n where d < maxBackoff { d = d * 2 } }
            return min(d, maxBackoff)
        }
    }

    /// One stage (or chain) run by `pipelinectl worker NAME`.
    public struct Stage: Sendable {
        public var name: String
        /// Catalog stage names, run as one chain in this order.
        public var chain: [String]
        public var inputs: [String]
        /// Output name → topic; an output without an entry goes to the topic of its own name.
        public var outputs: [String: String]
        public var deadLetterTopic: String
        public var group: String
        public var delivery: Delivery
        /// Compacted topic that keeps the per-partition state of a stateful stage.
        public var changelog: String?
        public var retry: RetryPolicy
        /// How often the runtime calls `advance` with the wall clock.
        public var advanceInterval: Duration
        /// How often a changed state is checkpointed (and the offsets after it committed).
        public var checkpointInterval: Duration
        /// Exactly-once: how long a transaction stays open at most; outputs become visible to
        /// `read_committed` readers when it commits (every state is checkpointed in each one).
        public var commitInterval: Duration = .milliseconds(100)
        /// Bounds on work in flight; partitions pause above them.
        public var maxInFlightRecords: Int
        public var maxInFlightBytes: Int
        /// Records a concurrent stage (`thumbnails.render`) works on at once, per worker (its
        /// fetches in flight; rendering is bounded by its own threads). Ordered stages ignore it.
        public var concurrency: Int
        public var options: TransformCatalog.Options
        /// The topology's topics declared `dedupe-key: content`.
        public var topicsIdentifiedByContent: Set<String> = []

        public func topic(forOutput output: String) -> String { outputs[output] ?? output }

        /// Whether `topic` identifies its records by content: its records get no `dedupe-key`
        /// header, and inputs read from it have ``Workers/InputRecord/identifiedByContent``.
        public func identifiesByContent(topic: String) -> Bool {
            !topicsIdentifiedByContent.isEmpty && topicsIdentifiedByContent.contains(topic)
        }

        /// The logical outputs that go to a topic identified by content: a transform does not
        /// write their dedupe keys (``Workers/TransformOutput/outputsIdentifiedByContent``).
        public var outputsIdentifiedByContent: Set<String> {
            guard !topicsIdentifiedByContent.isEmpty else { return [] }
            var names = Set(outputs.filter { topicsIdentifiedByContent.contains($0.value) }.keys)
            for topic in topicsIdentifiedByContent where outputs[topic] == nil { names.insert(topic) }
            return names
        }

        /// A stateful stage with several inputs joins them: its state is kept per partition
        /// number across the inputs (which must be co-partitioned: the same partition count and
        /// keys), so records of one key from every input meet in one state.
        public var joinsInputs: Bool { changelog != nil && inputs.count > 1 }
    }

    public var topics: [Topic]
    public var stages: [Stage]
    /// Where it was read from (for messages).
    public var source: String

    public func topic(named name: String) -> Topic? { topics.first { $0.name == name } }

    public func stage(named name: String) throws(TopologyError) -> Stage {
        guard let stage = stages.first(where: { $0.name == name }) else {
            throw TopologyError(source: source, line: nil, path: "stages",
                message: "no stage named '\(name)'; this topology has: \(stages.map(\.name).joined(separator: ", "))")
        }
        return stage
    }

    public static func load(path: String) throws(TopologyError) -> Topology {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw TopologyError(source: path, line: nil, path: "", message: "cannot read the file: \(error.localizedDescription)")
        }
        return try parse(text, source: path)
    }

    public static func parse(_ yaml: String, source: String = "topology") throws(TopologyError) -> Topology {
        let root: Node?
        do { root = try Yams.compose(yaml: yaml) } catch let error as YamlError {
            throw TopologyError(source: source, line: nil, path: "", message: "not valid YAML: \(error)")
        } catch {
            throw TopologyError(source: source, line: nil, path: "", message: "not valid YAML: \(error)")
        }
        guard let root else { throw TopologyError(source: source, line: 1, path: "", message: "the file is empty") }
        let reader = TopologyReader(source: source)
        return try reader.topology(root)
    }
}

/// What is wrong with a topology file, and where.
public struct TopologyError: Error, CustomStringConvertible, Equatable {
    public var source: String
    public var line: Int?
    /// The key path, e.g. `stages[1].retry.attempts`.
    public var path: String
    public var message: String

    public var description: String {
        let place = line.map { "\(source):\($0)" } ?? source
        return path.isEmpty ? "\(place): \(message)" : "\(place): \(path): \(message)"
    }
}

/// Walks the YAML nodes with the line of every value at hand.
private struct TopologyReader {
    let source: String

    func fail(_ node: Node?, _ path: String, _ message: String) -> TopologyError {
        TopologyError(source: source, line: node?.mark?.line, path: path, message: message)
    }

    func mapping(_ node: Node, _ path: String, allowed: [String]) throws(TopologyError) -> [(key: String, value: Node)] {
        guard let mapping = node.mapping else { throw fail(node, path, "expected a mapping (key: value lines)") }
        var out: [(String, Node)] = []
        for (k, v) in mapping {
            guard let key = k.string else { throw fail(k, path, "expected a text key") }
            guard allowed.contains(key) else {
                throw fail(k, path.isEmpty ? key : "\(path).\(key)", "unknown key; expected one of: \(allowed.joined(separator: ", "))")
            }
            out.append((key, v))
        }
        return out
    }

    func string(_ node: Node, _ path: String) throws(TopologyError) -> String {
        guard case .scalar(let s) = node, !s.string.isEmpty else { throw fail(node, path, "expected a non-empty text") }
        return s.string
    }

    func int(_ node: Node, _ path: String, min: Int = 1) throws(TopologyError) -> Int {
        guard let i = node.int, i >= min else {
            throw fail(node, path, "expected an integer of at least \(min), found '\(node.string ?? "a \(kind(node))")'")
        }
        return i
    }

    func strings(_ node: Node, _ path: String) throws(TopologyError) -> [String] {
        if case .scalar = node { return [try string(node, path)] }
        guard let seq = node.sequence, !seq.isEmpty else { throw fail(node, path, "expected a list of names") }
        var out: [String] = []
        for (i, n) in seq.enumerated() { out.append(try string(n, "\(path)[\(i)]")) }
        return out
    }

    func duration(_ node: Node, _ path: String) throws(TopologyError) -> Duration {
        guard let text = node.string, let d = parseDuration(text) else {
            throw fail(node, path, "expected a duration such as 250ms, 2s, 5m or 1h, found '\(node.string ?? kind(node))'")
        }
        return d
    }

    func kind(_ node: Node) -> String {
        switch node {
        case .mapping: "mapping"
        case .sequence: "list"
        case .scalar: "scalar"
        case .alias: "alias"
        }
    }

    func topology(_ root: Node) throws(TopologyError) -> Topology {
        var topics: [Topology.Topic] = []
        var stages: [Topology.Stage] = []
        var topicsNode: Node?
        var stagesNode: Node?
        for (key, value) in try mapping(root, "", allowed: ["topics", "stages"]) {
            if key == "topics" { topicsNode = value } else { stagesNode = value }
        }
        guard let topicsNode, let list = topicsNode.sequence else { throw fail(topicsNode ?? root, "topics", "expected a list of topics") }
        for (i, node) in list.enumerated() { topics.append(try topic(node, "topics[\(i)]")) }
        var seen = Set<String>()
        for (i, t) in topics.enumerated() where !seen.insert(t.name).inserted {
            throw fail(list[i], "topics[\(i)].name", "topic '\(t.name)' is defined twice")
        }
        guard let stagesNode, let stageList = stagesNode.sequence else { throw fail(stagesNode ?? root, "stages", "expected a list of stages") }
        let topicsByName = Dictionary(uniqueKeysWithValues: topics.map { ($0.name, $0) })
        for (i, node) in stageList.enumerated() { stages.append(try stage(node, "stages[\(i)]", topics: topicsByName)) }
        var names = Set<String>(), groups = Set<String>(), changelogs: [String: String] = [:]
        for (i, s) in stages.enumerated() {
            guard names.insert(s.name).inserted else { throw fail(stageList[i], "stages[\(i)].name", "stage '\(s.name)' is defined twice") }
            guard groups.insert(s.group).inserted else {
                throw fail(stageList[i], "stages[\(i)].group", "consumer group '\(s.group)' is used by two stages; each stage needs its own")
            }
            if let changelog = s.changelog {
                if let other = changelogs[changelog] {
                    throw fail(
                        stageList[i].mapping?["changelog"] ?? stageList[i], "stages[\(i)].changelog",
                        "changelog topic '\(changelog)' is already stage '\(other)''s; each stateful stage needs its own")
                }
                changelogs[changelog] = s.name
            }
        }
        return Topology(topics: topics, stages: stages, source: source)
    }

    /// A stage's `options:`: each key goes to the chain's stage that declares it
    /// (``TransformCatalog/options(forStage:)``), which reads its value.
    func stageOptions(_ node: Node, _ path: String, chain: [String], into options: inout TransformCatalog.Options) throws(TopologyError) {
        var declared: [TransformOption] = []
        for stage in chain {
            for option in TransformCatalog.options(forStage: stage) where !declared.contains(where: { $0.key == option.key }) { declared.append(option) }
        }
        guard let mapping = node.mapping else { throw fail(node, path, "expected a mapping of options (key: value lines)") }
        for (k, v) in mapping {
            guard let key = k.string else { throw fail(k, path, "expected a text key") }
            guard let option = declared.first(where: { $0.key == key }) else {
                let takes = declared.isEmpty ? "takes no options" : "takes: \(declared.map(\.key).joined(separator: ", "))"
                throw fail(k, "\(path).\(key)", "unknown key; \(chain.joined(separator: ",")) \(takes)")
            }
            do {
                try option.apply(optionValue(v), &options)
            } catch {
                throw TopologyError(source: source, line: error.line ?? v.mark?.line, path: "\(path).\(key)\(error.path)", message: error.message)
            }
        }
    }

    /// The YAML node as the stages read it, with its lines.
    func optionValue(_ node: Node) -> OptionValue {
        let line = node.mark?.line
        switch node {
        case .scalar(let scalar): return .scalar(scalar.string, line: line)
        case .sequence(let items): return .list(items.map(optionValue), line: line)
        case .mapping(let entries): return .mapping(entries.map { (key: $0.key.string ?? "", value: optionValue($0.value)) }, line: line)
        case .alias: return .scalar("", line: line)
        }
    }

    func topic(_ node: Node, _ path: String) throws(TopologyError) -> Topology.Topic {
        var name: String?
        var partitions = 1, replication = 1
        var config: [String: String] = [:]
        var dedupeKey = Topology.DedupeKey.header
        for (key, value) in try mapping(node, path, allowed: ["name", "partitions", "replication-factor", "dedupe-key", "config"]) {
            switch key {
            case "name": name = try string(value, "\(path).name")
            case "dedupe-key":
                guard let text = value.string, let mode = Topology.DedupeKey(rawValue: text) else {
                    throw fail(value, "\(path).dedupe-key", "expected header or content, found '\(value.string ?? kind(value))'")
                }
                dedupeKey = mode
            case "partitions": partitions = try int(value, "\(path).partitions")
            case "replication-factor": replication = try int(value, "\(path).replication-factor")
            default:
                guard let m = value.mapping else { throw fail(value, "\(path).config", "expected a mapping of topic configs") }
                for (k, v) in m {
                    guard let ck = k.string, let cv = v.string else { throw fail(k, "\(path).config", "expected text keys and values") }
                    config[ck] = cv
                }
            }
        }
        guard let name else { throw fail(node, "\(path).name", "missing; every topic needs a name") }
        return Topology.Topic(name: name, partitions: partitions, replicationFactor: replication, config: config, dedupeKey: dedupeKey)
    }

    func stage(_ node: Node, _ path: String, topics: [String: Topology.Topic]) throws(TopologyError) -> Topology.Stage {
        let allowed = [
            "name", "chain", "inputs", "outputs", "dead-letter-topic", "group", "delivery", "changelog", "retry",
            "advance-interval", "checkpoint-interval", "commit-interval", "max-in-flight-records", "max-in-flight-bytes", "concurrency", "options",
        ]
        var name: String?, chain: [String]?, inputs: [String]?, deadLetter: String?, group: String?, changelog: String?
        var outputs: [String: String] = [:]
        var delivery = Topology.Delivery.atLeastOnce
        var retry = Topology.RetryPolicy()
        var advance = Duration.seconds(1), checkpoint = Duration.seconds(1), commit = Duration.milliseconds(100)
        var maxRecords = 10_000, maxBytes = 64 << 20, concurrency = 16
        var options = TransformCatalog.Options()
        var optionsNode: Node?
        func topicName(_ value: Node, _ p: String) throws(TopologyError) -> String {
            let t = try string(value, p)
            guard topics[t] != nil else { throw fail(value, p, "topic '\(t)' is not among the topology's topics") }
            return t
        }
        for (key, value) in try mapping(node, path, allowed: allowed) {
            let p = "\(path).\(key)"
            switch key {
            case "name": name = try string(value, p)
            case "chain":
                let names = try strings(value, p)
                let known = TransformCatalog.names + TransformCatalog.concurrentNames
                for (i, n) in names.enumerated() where !known.contains(n) {
                    throw fail(value.sequence?[i] ?? value, "\(p)[\(i)]", "unknown stage '\(n)'; known stages: \(known.joined(separator: ", "))")
                }
                if names.count > 1, let n = names.first(where: TransformCatalog.concurrentNames.contains) {
                    throw fail(value, p, "\(n) does I/O and runs alone in its stage: chain: [\(n)]")
                }
                chain = names
            case "inputs":
                let list = try strings(value, p)
                for (i, t) in list.enumerated() where topics[t] == nil {
                    throw fail(value.sequence?[i] ?? value, "\(p)[\(i)]", "topic '\(t)' is not among the topology's topics")
                }
                inputs = list
            case "outputs":
                guard let m = value.mapping else { throw fail(value, p, "expected a mapping of output name: topic") }
                for (k, v) in m {
                    guard let output = k.string else { throw fail(k, p, "expected an output name") }
                    outputs[output] = try topicName(v, "\(p).\(output)")
                }
            case "dead-letter-topic": deadLetter = try topicName(value, p)
            case "group": group = try string(value, p)
            case "delivery":
                guard let text = value.string, let d = Topology.Delivery(rawValue: text) else {
                    throw fail(value, p, "expected at-least-once or exactly-once, found '\(value.string ?? kind(value))'")
                }
                delivery = d
            case "changelog":
                let t = try topicName(value, p)
                guard topics[t]?.config["cleanup.policy"]?.contains("compact") == true else {
                    throw fail(value, p, "changelog topic '\(t)' must have config cleanup.policy: compact (only the latest state per partition is needed)")
                }
                changelog = t
            case "retry":
                for (rk, rv) in try mapping(value, p, allowed: ["attempts", "initial-backoff", "max-backoff"]) {
                    switch rk {
                    case "attempts": retry.attempts = try int(rv, "\(p).attempts")
                    case "initial-backoff": retry.initialBackoff = try duration(rv, "\(p).initial-backoff")
                    default: retry.maxBackoff = try duration(rv, "\(p).max-backoff")
                    }
                }
            case "advance-interval": advance = try duration(value, p)
            case "checkpoint-interval": checkpoint = try duration(value, p)
            case "commit-interval": commit = try duration(value, p)
            case "max-in-flight-records": maxRecords = try int(value, p)
            case "max-in-flight-bytes": maxBytes = try int(value, p)
            case "concurrency": concurrency = try int(value, p)
            default: optionsNode = value
            }
        }
        guard let name else { throw fail(node, "\(path).name", "missing; every stage needs a name") }
        guard let chain else { throw fail(node, "\(path).chain", "missing; name the catalog stage(s) to run") }
        guard let inputs else { throw fail(node, "\(path).inputs", "missing; name the input topic(s)") }
        guard let deadLetter else { throw fail(node, "\(path).dead-letter-topic", "missing; every stage needs a dead-letter topic") }
        if let optionsNode { try stageOptions(optionsNode, "\(path).options", chain: chain, into: &options) }
        // The push senders keep their sent ledger by each notification's dedupe-key header.
        if let sender = chain.first(where: { $0.hasPrefix("push.") }), let content = inputs.first(where: { topics[$0]?.dedupeKey == .content }) {
            throw fail(node, "\(path).inputs", "\(sender) needs each record's dedupe-key header, but '\(content)' is declared dedupe-key: content")
        }
        if changelog != nil, inputs.count > 1 {
            let counts = Set(inputs.compactMap { topics[$0]?.partitions })
            guard counts.count == 1 else {
                throw fail(node, "\(path).inputs", "a stateful stage joins its inputs per partition, so they need the same partition count: "
                    + inputs.map { "\($0) has \(topics[$0]?.partitions ?? 0)" }.joined(separator: ", "))
            }
        }
        return Topology.Stage(
            name: name, chain: chain, inputs: inputs, outputs: outputs, deadLetterTopic: deadLetter, group: group ?? name,
            delivery: delivery, changelog: changelog, retry: retry, advanceInterval: advance, checkpointInterval: checkpoint,
            commitInterval: commit, maxInFlightRecords: maxRecords, maxInFlightBytes: maxBytes, concurrency: concurrency, options: options,
            topicsIdentifiedByContent: Set(topics.values.filter { $0.dedupeKey == .content }.map(\.name)))
    }
}

/// `250ms`, `2s`, `5m`, `1h` (a bare number is seconds).
public func parseDuration(_ text: String) -> Duration? { parseMilliseconds(text).map { .milliseconds($0) } }

extension Duration {
    var wholeMillis: Int64 { wholeMilliseconds }
}
