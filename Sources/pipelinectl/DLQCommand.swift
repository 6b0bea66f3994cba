import ArgumentParser
import Foundation
import Pipeline
import TextTable
import Workers
import Kafka
import Operations

/// `pipelinectl dlq list|show|redrive`.
struct DLQ: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq",
        abstract: "List, show and redrive dead letters.",
        discussion: """
            Dead letters are the original records plus dead-letter.* headers (stage, reason, \
            field, detail, origin topic/partition/offset, attempts). Reading never joins or \
            commits for a group.

            Examples:
              pipelinectl dlq list --reason missing-field
              pipelinectl dlq show --stage hangouts-decode --json
              pipelinectl dlq redrive --reason delivery-failed            # dry run
              pipelinectl dlq redrive --reason delivery-failed --execute
            """,
        subcommands: [List.self, Show.self, Redrive.self])

    /// The filters every subcommand shares.
    struct Selection: ParsableArguments {
        @Option(help: "The dead-letter topic.") var topic = "pipeline.dead-letters"
        @Option(name: .customLong("reason"), help: "Only this reason (repeatable), e.g. missing-field, delivery-failed.") var reasons: [String] = []
        @Option(name: .customLong("stage"), help: "Only dead letters of this stage (repeatable).") var stages: [String] = []
        @Option(name: .customLong("origin-topic"), help: "Only dead letters from this input topic (repeatable).") var originTopics: [String] = []
        @Option(name: .customLong("field"), help: "Only dead letters failing on this field (repeatable), e.g. trade_price, or $ for the whole record.") var fields: [String] = []
        @Option(name: .customLong("key"), help: "Only dead letters whose original record has this key, as text (repeatable).") var keys: [String] = []
        @Option(help: "Only dead letters whose record timestamp (the original record's) is at or after this time (epoch ms, ISO-8601 or a duration such as 2h).") var since: String?
        @Option(help: "Only dead letters whose record timestamp is before this time.") var until: String?
        @Option(help: "Start each partition of the dead-letter topic here, PARTITION:OFFSET[,…] (what a redrive --execute prints as the next start).") var from: String?
        @Option(name: .customLong("partition"), help: "Only this partition of the dead-letter topic (repeatable).") var partitions: [Int32] = []
        @Option(help: "Only the dead letter at this offset (with --partition).") var offset: Int64?
        @OptionGroup var connection: RequiredConnection

        func validate() throws {
            let known = Set(DecodeFailure.Reason.allCases.map(\.rawValue))
            for r in reasons where !known.contains(r) {
                throw ValidationError("--reason: '\(r)' is not a reason; use one of \(known.sorted().joined(separator: ", "))")
            }
            _ = try parseTime(since, flag: "--since")
            _ = try parseTime(until, flag: "--until")
            if offset != nil, partitions.count != 1 { throw ValidationError("--offset needs exactly one --partition") }
            try checkRange(offset, NumberBounds.offset, flag: "--offset", what: "an offset")
            for p in partitions { try checkRange(Int64(p), NumberBounds.partition, flag: "--partition", what: "a partition") }
            _ = try fromOffsets()
        }

        /// What to say when nothing matched: with a --stage that no dead letter has, the stages that exist.
        func nothingMatched(stages seen: Set<String>) -> String {
            var line = "no dead letters in \(topic) match"
            let unknown = Set(stages).subtracting(seen)
            if !unknown.isEmpty, !seen.isEmpty {
                line += "; no dead letter has stage \(unknown.sorted().joined(separator: ", ")) (stages present: \(seen.sorted().joined(separator: ", ")); a stage is a topology name, e.g. prices-decode)"
            }
            return line
        }

        /// `--from 0:12,1:7` as partition → offset.
        func fromOffsets() throws -> [Int32: Int64] {
            guard let from else { return [:] }
            var out: [Int32: Int64] = [:]
            for part in from.split(separator: ",") {
                let pieces = part.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
                guard pieces.count == 2 else { throw ValidationError("--from: '\(part)' is not PARTITION:OFFSET (e.g. --from 0:12,1:7)") }
                do {
                    let p = try NumberBounds.parse(pieces[0], NumberBounds.partition, what: "a partition")
                    out[Int32(p)] = try NumberBounds.parse(pieces[1], NumberBounds.offset, what: "an offset")
                } catch {
                    throw ValidationError("--from: '\(part)' is not PARTITION:OFFSET (e.g. --from 0:12,1:7): \(error.description)")
                }
            }
            return out
        }

        func selection() throws -> DeadLetterSelection {
            var s = DeadLetterSelection()
            s.reasons = Set(reasons)
            s.stages = Set(stages)
            s.originTopics = Set(originTopics)
            s.fields = Set(fields)
            s.keys = Set(keys)
            s.since = try parseTime(since, flag: "--since")
            s.until = try parseTime(until, flag: "--until")
            return s
        }

        /// Reads the dead-letter topic to its end; returns the selected dead letters and how many
        /// records were not dead letters at all.
        func read() async throws -> (entries: [DeadLetterEntry], foreign: Int) {
            let (entries, foreign, _) = try await readWithStages()
            return (entries, foreign)
        }

        /// Also returns every stage seen, to suggest one when a --stage matched nothing.
        func readWithStages() async throws -> (entries: [DeadLetterEntry], foreign: Int, stages: Set<String>) {
            let (entries, foreign, stages, _) = try await readAll()
            return (entries, foreign, stages)
        }

        /// Also the offset after the last record read per partition (where a next run starts).
        func readAll() async throws -> (entries: [DeadLetterEntry], foreign: Int, stages: Set<String>, next: [Int32: Int64]) {
            try Preflight.checkRuntime()
            let kafka = connection.kafka
            let admin = try KafkaAdmin(configuration: kafka)
            let all: [TopicPartition]
            do { all = try await topicPartitions(of: topic, admin: admin, flag: "--topic") } catch {
                await admin.close()
                throw error
            }
            await admin.close()
            let chosen = all.filter { partitions.isEmpty || partitions.contains($0.partition) }
            let from = try fromOffsets()
            let start = chosen.map { TopicPartitionOffset($0.topic, $0.partition, offset: offset ?? from[$0.partition] ?? TopicPartitionOffset.beginning) }
            var next: [Int32: Int64] = [:]
            for s in start where s.offset >= 0 { next[s.partition] = s.offset }
            // --offset is at most NumberBounds.offset's end (validate()), so the next one exists.
            let stop = offset.map { o in Dictionary(uniqueKeysWithValues: chosen.map { ($0, NumberBounds.saturatingAdd(o, 1)) }) } ?? [:]
            let selection = try selection()
            var entries: [DeadLetterEntry] = []
            var foreign = 0
            var seen = Set<String>()
            let progress = ProgressIndicator("reading \(topic)")
            defer { progress.finish() }
            var read = 0
            try await TopicReader(kafka: kafka).read(from: start, until: stop) { batch in
                for r in batch {
                    guard let e = DeadLetterEntry(r) else { foreign += 1; continue }
                    seen.insert(e.letter.stage)
                    if selection.matches(e) { entries.append(e) }
                }
                read += batch.count
                for r in batch { next[r.partition] = max(next[r.partition] ?? 0, NumberBounds.saturatingAdd(r.offset, 1)) }
                progress.update(read)
                return true
            }
            progress.finish()
            return (entries, foreign, seen, next)
        }
    }

    struct Row: Encodable {
        var partition: Int32
        var offset: Int64
        var timestamp: Int64?
        var stage: String
        var reason: String
        var field: String
        var detail: String
        var originTopic: String
        var originPartition: Int32
        var originOffset: Int64
        var attempts: Int
        var redriven: Int
        var errorCode: String?

        init(_ e: DeadLetterEntry) {
            partition = e.record.partition
            offset = e.record.offset
            timestamp = e.record.timestamp
            stage = e.letter.stage
            reason = e.letter.failure.reason.rawValue
            field = e.letter.failure.field
            detail = e.letter.failure.detail
            originTopic = e.letter.origin.topic
            originPartition = e.letter.origin.partition
            originOffset = e.letter.origin.offset
            attempts = e.letter.attempts
            redriven = e.redriveCount
            errorCode = e.letter.errorCode
        }
    }

    /// One line per dead letter (the detail cut to 60 characters); nil without any.
    static func table(_ entries: [DeadLetterEntry]) -> String? {
        TextTable<DeadLetterEntry> { e in
            let detail = e.letter.failure.detail
            return [
                Column("PARTITION" <- e.record.partition, align: .right), Column("OFFSET" <- e.record.offset, align: .right),
                Column("STAGE" <- e.letter.stage), Column("REASON" <- e.letter.failure.reason.rawValue),
                Column("FIELD" <- (e.letter.failure.field.isEmpty ? "-" : e.letter.failure.field)),
                Column("ORIGIN" <- "\(e.letter.origin.topic)[\(e.letter.origin.partition)]@\(e.letter.origin.offset)"),
                Column("ATTEMPTS" <- e.letter.attempts, align: .right), Column("REDRIVEN" <- e.redriveCount, align: .right),
                Column("DETAIL" <- (detail.count > 60 ? String(detail.prefix(57)) + "..." : detail)),
            ]
        }.render(entries)
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List dead letters with their stage, reason and origin.",
            discussion: """
                One row per dead letter, then counts by stage and reason.

                Examples:
                  pipelinectl dlq list
                  pipelinectl dlq list --stage prices-decode --since 1h --json
                """)
        @OptionGroup var selection: Selection
        @Flag(help: "One JSON object with the rows and counts.") var json = false

        struct Output: Encodable {
            var topic: String
            var deadLetters: [Row]
            var counts: [String: Int]
            var notDeadLetters: Int
        }

        func run() async throws {
            let (entries, foreign, seen) = try await selection.readWithStages()
            var counts: [String: Int] = [:]
            for e in entries { counts["\(e.letter.stage) \(e.letter.failure.reason.rawValue)", default: 0] += 1 }
            if json {
                try printJSON(Output(topic: selection.topic, deadLetters: entries.map(Row.init), counts: counts, notDeadLetters: foreign))
                return
            }
            if entries.isEmpty {
                print(selection.nothingMatched(stages: seen))
            } else {
                print(DLQ.table(entries) ?? "")
                print("")
                for (k, n) in counts.sorted(by: { $0.key < $1.key }) { print("\(n)\t\(k)") }
            }
            if foreign > 0 { print("\(foreign) records in \(selection.topic) are not dead letters (no dead-letter.* headers)") }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show dead letters in full: headers, key and value.",
            discussion: """
                Examples:
                  pipelinectl dlq show --partition 0 --offset 17
                  pipelinectl dlq show --reason wrong-type --json | jq .value
                """)
        @OptionGroup var selection: Selection
        @Flag(help: "One JSON line per dead letter, as `pipelinectl replay` writes records.") var json = false

        func run() async throws {
            let (entries, _, seen) = try await selection.readWithStages()
            if json {
                for e in entries { print(RecordJSON.line(e.record)) }
                return
            }
            for e in entries {
                print("\(selection.topic)[\(e.record.partition)]@\(e.record.offset)  timestamp \(e.record.timestamp.map(String.init) ?? "-")")
                print("  stage      \(e.letter.stage)")
                print("  reason     \(Terminal.paint(e.letter.failure.reason.rawValue, "31")) \(e.letter.failure.field)")
                print("  detail     \(e.letter.failure.detail)")
                print("  origin     \(e.letter.origin.topic)[\(e.letter.origin.partition)]@\(e.letter.origin.offset)")
                print("  attempts   \(e.letter.attempts)\(e.letter.errorCode.map { "  error code \($0)" } ?? "")  redriven \(e.redriveCount)")
                print("  key        \(e.record.key.map { String(decoding: $0, as: UTF8.self) } ?? "(none)")")
                for h in e.letter.headers { print("  header     \(h.name)=\(String(decoding: h.value, as: UTF8.self))") }
                print("  value      \(e.record.value.map { String(decoding: $0, as: UTF8.self) } ?? "(tombstone)")")
                print("")
            }
            if entries.isEmpty { print(selection.nothingMatched(stages: seen)) }
        }
    }

    struct Redrive: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send dead letters back to where they belong (dry run unless --execute).",
            discussion: """
                Each selected dead letter goes back to its origin topic and partition with its \
                original key, value, timestamp and headers, plus dead-letter.redriven=N (the Nth \
                redrive); an output that could not be delivered goes to its destination topic \
                and partition instead (dead-letter.destination.topic), as it was produced. An \
                input goes with dead-letter.redrive-for naming the stage that failed it: only \
                that stage processes it again, every other stage reading the topic skips it (the \
                output says who processes what again). One \
                that fails again comes back to the dead-letter topic carrying that header; once \
                it was redriven --max-redrives times it is left where it is and reported (exit \
                code 4), so a record that keeps failing does not loop. The dead-letter topic is \
                not changed (Kafka cannot delete single records): after --execute it prints the \
                --from PARTITION:OFFSET list where the next run should start, so the same dead \
                letters are not redriven twice.

                Examples:
                  # what would go where
                  pipelinectl dlq redrive --stage products-decode
                  pipelinectl dlq redrive --reason delivery-failed --since 2h --execute
                  # after an earlier run
                  pipelinectl dlq redrive --from 0:12,1:7,2:0,3:3 --execute
                """)
        @OptionGroup var selection: Selection
        @Flag(help: "Send (without it, only report).") var execute = false
        @Option(help: "Leave dead letters that were redriven this many times already.") var maxRedrives = 3
        @Flag(help: "Print the plan and outcome as JSON.") var json = false

        func validate() throws {
            guard maxRedrives > 0 else { throw ValidationError("--max-redrives must be at least 1, got \(maxRedrives)") }
        }

        struct Output: Encodable {
            var dryRun: Bool
            var selected: Int
            var sent: Int
            var failed: Int
            var exhausted: [Row]
            var byTopic: [String: Int]
        }

        func run() async throws {
            let (entries, _, seen, next) = try await selection.readAll()
            let plan = RedrivePlan(entries, maxRedrives: maxRedrives)
            let sends = plan.sends, exhausted = plan.exhausted
            var byTopic: [String: Int] = [:]
            for r in sends { byTopic[r.topic, default: 0] += 1 }
            var failed = 0
            if execute, !sends.isEmpty {
                let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: selection.connection.kafka))
                let outcome = try await plan.execute(with: producer)
                for error in outcome.failed { Terminal.error("not delivered: \(error)") }
                failed = outcome.failed.count
                await producer.close()
            }
            if json {
                try printJSON(Output(dryRun: !execute, selected: entries.count, sent: execute ? sends.count - failed : 0, failed: failed,
                                     exhausted: exhausted.map(Row.init), byTopic: byTopic))
            } else {
                for (topic, n) in byTopic.sorted(by: { $0.key < $1.key }) {
                    print("\(execute ? "redrove" : "would redrive") \(n) dead letters to \(topic)")
                }
                for (seenBy, n) in plan.audiences { print("  \(n) processed again by \(seenBy)") }
                if entries.isEmpty { print(selection.nothingMatched(stages: seen)) }
                if !exhausted.isEmpty {
                    print("left \(exhausted.count) dead letters redriven \(maxRedrives) times already:")
                    print(DLQ.table(exhausted) ?? "")
                }
                if !execute, !sends.isEmpty { print("dry run: add --execute to send") }
                if execute, !next.isEmpty {
                    // Redriven dead letters stay in the topic: the next run starts after them.
                    print("next redrive: --from " + next.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ","))
                }
            }
            if failed > 0 { throw ExitCode(Exit.failure) }
            if !exhausted.isEmpty { throw ExitCode(Exit.partial) }
        }
    }
}
