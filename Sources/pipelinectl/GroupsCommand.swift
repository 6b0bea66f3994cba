import ArgumentParser
import Foundation
import Pipeline
import TextTable
import Kafka
import Operations

/// `pipelinectl groups list|describe|reset-offsets`.
struct Groups: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List and describe consumer groups; reset their offsets.",
        discussion: """
            Examples:
              pipelinectl groups list
              pipelinectl groups describe prices-candles
              # dry run
              pipelinectl groups reset-offsets prices-candles --topic prices.raw \\
                  --to-datetime 2h
              pipelinectl groups reset-offsets prices-candles --topic prices.raw \\
                  --shift-by -100 --execute
            """,
        subcommands: [List.self, Describe.self, ResetOffsets.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List consumer groups with their state.",
                                                        discussion: "Example:\n  pipelinectl groups list --json")
        @Flag(help: "JSON instead of a table.") var json = false
        @OptionGroup var connection: RequiredConnection

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: connection.kafka)
            let groups: [ConsumerGroupListing]
            do { groups = try await admin.listGroups().filter { !$0.group.hasPrefix("pipelinectl-reader-") } } catch {
                await admin.close()
                throw error
            }
            await admin.close()
            if json { return try printJSON(groups) }
            let table = TextTable<ConsumerGroupListing> { g in
                [Column("GROUP" <- g.group), Column("STATE" <- g.state), Column("TYPE" <- (g.isSimple ? "simple" : "consumer"))]
            }
            print(table.render(groups) ?? "no consumer groups")
        }
    }

    struct Describe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A group's state, members, assignments, committed offsets and lag.",
            discussion: "Example:\n  pipelinectl groups describe campaigns-feed --json")
        @Argument(help: "The group.") var group: String
        @Flag(help: "JSON instead of tables.") var json = false
        @OptionGroup var connection: RequiredConnection

        func run() async throws {
            try Preflight.checkRuntime()
            let kafka = connection.kafka
            let admin = try KafkaAdmin(configuration: kafka)
            var windows: [TopicPartition: CommitWindow] = [:]
            let lag: GroupLag
            do { lag = try await LagProbe(reader: TopicReader(kafka: kafka)).groupLag(group, admin: admin, windows: &windows) } catch {
                await admin.close()
                throw error
            }
            await admin.close()
            if json { return try printJSON(lag) }
            print("group \(group)  state \(lag.state ?? "unknown")  \(lag.members.count) members  status \(Terminal.status(lag.status.rawValue))")
            let members = TextTable<ConsumerGroupMember> { m in
                [Column("MEMBER" <- m.memberID), Column("CLIENT" <- m.clientID), Column("HOST" <- m.host),
                 Column("ASSIGNMENT" <- m.assignment.map(\.description).joined(separator: " "))]
            }
            if let members = members.render(lag.members) {
                print("")
                print(members)
            }
            print("")
            print(Lag.table([lag]) ?? "no committed offsets")
        }
    }

    struct ResetOffsets: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reset-offsets",
            abstract: "Move a group's committed offsets (dry run unless --execute; refused while the group has members).",
            discussion: """
                Give exactly one target. Offsets are kept within what each partition holds (low \
                watermark to log end; the log end is read from a fetch, as `lag` does). Stop the \
                group's workers first: a group with members is refused (exit code 4).

                Examples:
                  pipelinectl groups reset-offsets feed --topic campaigns.raw --to-earliest
                  pipelinectl groups reset-offsets feed --topic campaigns.raw --to-datetime \\
                      2024-05-06T00:00:00Z --execute
                  pipelinectl groups reset-offsets feed --topic campaigns.raw --partition 2 \\
                      --shift-by -50 --execute
                """)
        @Argument(help: "The group.") var group: String
        @Option(help: "The topic whose offsets move.") var topic: String
        @Option(name: .customLong("partition"), help: "Only this partition (repeatable; default: all).") var partitions: [Int32] = []
        @Flag(help: "To the first offset still stored.") var toEarliest = false
        @Flag(help: "To the log end (skip everything).") var toLatest = false
        @Option(help: "To the first record at or after this time (epoch ms, ISO-8601, or a duration before now such as 2h).") var toDatetime: String?
        @Option(parsing: .unconditional, help: "Move by this many records (negative: back, e.g. --shift-by -100).") var shiftBy: Int64?
        @Option(help: "To this offset.") var toOffset: Int64?
        @Flag(help: "Commit the new offsets (without it, only report).") var execute = false
        @Flag(help: "JSON instead of a table.") var json = false
        @OptionGroup var connection: RequiredConnection

        func validate() throws {
            let given = [toEarliest, toLatest, toDatetime != nil, shiftBy != nil, toOffset != nil].filter { $0 }.count
            guard given == 1 else {
                throw ValidationError("give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by, --to-offset (got \(given))")
            }
            _ = try parseTime(toDatetime, flag: "--to-datetime")
            try checkRange(shiftBy, NumberBounds.shift, flag: "--shift-by", what: "a shift")
            try checkRange(toOffset, NumberBounds.offset, flag: "--to-offset", what: "an offset")
            for p in partitions { try checkRange(Int64(p), NumberBounds.partition, flag: "--partition", what: "a partition") }
        }

        func target() throws -> OffsetResetTarget {
            if toEarliest { return .earliest }
            if toLatest { return .latest }
            if let t = try parseTime(toDatetime, flag: "--to-datetime") { return .time(t) }
            if let shiftBy { return .shift(shiftBy) }
            return .offset(toOffset ?? 0)
        }

        struct Output: Encodable {
            var group: String
            var executed: Bool
            var plan: [OffsetResetPlan]
            /// Set when the broker's time lookup was coarser than a record.
            var note: String?
        }

        func run() async throws {
            try Preflight.checkRuntime()
            let kafka = connection.kafka
            let admin = try KafkaAdmin(configuration: kafka)
            do {
                try await reset(admin: admin, kafka: kafka)
            } catch {
                await admin.close()
                throw error
            }
            await admin.close()
        }

        private func reset(admin: KafkaAdmin, kafka: KafkaConfiguration) async throws {
            let all = try await topicPartitions(of: topic, admin: admin, flag: "--topic")
            if let missing = partitions.first(where: { p in !all.contains { $0.partition == p } }) {
                throw ValidationError("--partition \(missing): \(topic) has partitions 0…\(all.count - 1)")
            }
            let prepared = try await PreparedOffsetReset.prepare(
                group: group, topic: topic, partitions: partitions, target: try target(), admin: admin, kafka: kafka)
            if !prepared.members.isEmpty {
                Terminal.error(PreparedOffsetReset.Refusal.hasMembers(group: group, members: prepared.members).description)
                throw ExitCode(Exit.partial)
            }
            if execute {
                do {
                    try await prepared.execute(admin: admin)
                } catch let refusal as PreparedOffsetReset.Refusal {
                    Terminal.error(refusal.description)
                    throw ExitCode(Exit.partial)
                }
            }
            let plan = prepared.plan
            if json { return try printJSON(Output(group: group, executed: execute, plan: plan, note: prepared.coarseNote)) }
            print(Groups.planTable(plan) ?? "no partitions selected")
            if let note = prepared.coarseNote { print("note: \(note)") }
            print(execute ? "committed new offsets for group \(group)" : "dry run: add --execute to commit these offsets for group \(group)")
        }
    }

    /// One line per partition; nil for an empty plan.
    static func planTable(_ plan: [OffsetResetPlan]) -> String? {
        TextTable<OffsetResetPlan> { p in
            [Column("TOPIC" <- p.topic), Column("PARTITION" <- p.partition, align: .right),
             Column("CURRENT" <- (p.current.map(String.init) ?? "-"), align: .right), Column("NEW" <- p.target, align: .right),
             Column("MOVE" <- (p.current.map { String(format: "%+lld", p.target - $0) } ?? "-"), align: .right)]
        }.render(plan)
    }
}
