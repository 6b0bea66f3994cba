import ArgumentParser
import Foundation
import Pipeline
import Testing
@testable import pipelinectl
import Kafka
import Operations

/// Golden `--help` of the operator commands and golden tables. `UPDATE_GOLDEN=1` rewrites the
/// files in Golden/ instead of comparing (review the diff before committing it).
@Suite struct OperatorCommandTests {
    static let golden = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")

    static func check(_ name: String, _ actual: String) throws {
        let file = golden.appendingPathComponent(name + ".txt")
        if ProcessInfo.processInfo.environment["UPDATE_GOLDEN"] == "1" {
            try (actual + "\n").write(to: file, atomically: true, encoding: .utf8)
            return
        }
        let expected = try String(contentsOf: file, encoding: .utf8)
        #expect(actual + "\n" == expected, "golden \(name).txt differs; rerun with UPDATE_GOLDEN=1 to update it")
    }

    static let commands: [(String, ParsableCommand.Type)] = [
        ("produce", Produce.self), ("ingest", Ingest.self), ("ingest-upbit", Ingest.Upbit.self), ("ingest-http", Ingest.HTTP.self), ("ingest-poll", Ingest.Poll.self), ("console", ConsoleCommand.self), ("replay", Replay.self), ("dlq", DLQ.self), ("dlq-list", DLQ.List.self),
        ("dlq-show", DLQ.Show.self), ("dlq-redrive", DLQ.Redrive.self), ("lag", Lag.self), ("groups", Groups.self),
        ("groups-list", Groups.List.self), ("groups-describe", Groups.Describe.self), ("groups-reset-offsets", Groups.ResetOffsets.self),
    ]

    @Test(arguments: commands.map(\.0)) func goldenHelp(_ name: String) throws {
        let command = try #require(Self.commands.first { $0.0 == name }?.1)
        let help = PipelineCtl.helpMessage(for: command, columns: 80)
        #expect(help.contains("Example"), "every command's help has examples")
        try Self.check("help-" + name, help)
    }

    /// Every command and subcommand, from the root down.
    static func allCommands(_ root: ParsableCommand.Type = PipelineCtl.self, path: [String] = []) -> [(String, ParsableCommand.Type)] {
        root.configuration.subcommands.flatMap { sub -> [(String, ParsableCommand.Type)] in
            let name = sub.configuration.commandName ?? String(describing: sub).lowercased()
            return [((path + [name]).joined(separator: " "), sub)] + allCommands(sub, path: path + [name])
        }
    }

    /// Lines of one paragraph (prose at the left margin, or an option's help in its column)
    /// that end although the next line's first word would have fitted: text wrapped twice, once
    /// by hand in the source and again by the parser.
    static func raggedLines(_ help: String, columns: Int) -> [String] {
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        func indent(_ l: String) -> Int { l.prefix { $0 == " " }.count }
        var ragged: [String] = []
        for (line, next) in zip(lines, lines.dropFirst()) {
            guard !line.trimmingCharacters(in: .whitespaces).isEmpty, !next.trimmingCharacters(in: .whitespaces).isEmpty else { continue }
            let i = indent(line)
            // The left margin (discussions) or an option's help column; examples and tables are
            // indented otherwise and keep their own lines.
            guard i == indent(next), i == 0 || i >= 20 else { continue }
            if line.hasSuffix(":") || next.trimmingCharacters(in: .whitespaces).hasPrefix("-") { continue }
            let firstWord = next.drop { $0 == " " }.prefix { $0 != " " }
            // The parser fills lines up to `columns - 1` characters.
            if line.count + 1 + firstWord.count < columns { ragged.append(line) }
        }
        // An example wider than the terminal is broken in two by the parser: every line of an
        // "Examples:" block stays indented.
        var inExamples = false
        for line in lines {
            if line.hasSuffix("Examples:") { inExamples = true; continue }
            if line.isEmpty { inExamples = false; continue }
            if inExamples, !line.hasPrefix("  ") { ragged.append(line) }
        }
        return ragged
    }

    @Test func noHelpIsWrappedTwice() {
        for (name, command) in Self.allCommands() {
            let help = PipelineCtl.helpMessage(for: command, columns: 80)
            let ragged = Self.raggedLines(help, columns: 80)
            #expect(ragged.isEmpty, "pipelinectl \(name) --help: lines end early: \(ragged)")
        }
        #expect(Self.allCommands().count >= 25, "every command is checked")
    }

    @Test func theRaggednessCheckFindsADoubleWrap() {
        let twice = "The worker joins the stage's consumer group, processes its input partitions in\norder (with per-partition state restored from the stage's changelog topic).\n"
        #expect(Self.raggedLines(twice, columns: 80).isEmpty)
        let ragged = "SIGTERM or SIGINT stops it gracefully: it stops fetching, delivers what is in\nflight,\ncheckpoints state.\n"
        #expect(Self.raggedLines(ragged, columns: 80) == ["flight,"])
    }

    @Test func rootHelpListsTheCommandsAndExitCodes() {
        let help = PipelineCtl.helpMessage(columns: 80)
        for name in ["produce", "ingest", "replay", "dlq", "lag", "groups", "Exit codes"] { #expect(help.contains(name)) }
    }

    @Test func goldenLagTable() throws {
        let now: Int64 = 1_000_000
        var p0 = PartitionLag(topic: "prices.raw", partition: 0, committed: 120, logEnd: 150, firstUnconsumedTimestamp: now - 4200, now: now)
        p0.owner = "worker-1"
        p0.status = .warn
        var p1 = PartitionLag(topic: "prices.raw", partition: 1, committed: 90, logEnd: 90, firstUnconsumedTimestamp: nil, now: now)
        p1.owner = "worker-2"
        let p2 = PartitionLag(topic: "prices.raw", partition: 2, committed: 7, logEnd: nil, firstUnconsumedTimestamp: nil, now: now)
        let group = GroupLag(group: "prices-candles", state: "Stable", members: [], partitions: [p0, p1, p2], status: .warn)
        try Self.check("table-lag", try #require(Lag.table([group])))
        try Self.check("table-reset-plan", try #require(Groups.planTable([
            OffsetResetPlan(topic: "campaigns.raw", partition: 0, current: 40, target: 10),
            OffsetResetPlan(topic: "campaigns.raw", partition: 1, current: nil, target: 0),
        ])))
        // In colour the STATUS cells are painted after padding: the same table once the codes are gone.
        let coloured = try #require(Lag.table([group], paint: Red.self))
        #expect(coloured.contains("\u{1B}[31mWARN\u{1B}[0m"))
        #expect(coloured.replacingOccurrences(of: "\u{1B}[31m", with: "").replacingOccurrences(of: "\u{1B}[0m", with: "") == Lag.table([group]))
        #expect(Lag.table([]) == nil && Groups.planTable([]) == nil, "no rows, no table")
    }

    enum Red: CellPaint {
        static func paint(_ text: String, column: String) -> String? { column == "STATUS" ? "\u{1B}[31m\(text)\u{1B}[0m" : nil }
    }

    @Test func operatorErrorsNameTheFlagAndTheFix() {
        func message(_ args: [String]) -> String {
            do {
                _ = try PipelineCtl.parseAsRoot(args)
                return ""
            } catch {
                return PipelineCtl.message(for: error)
            }
        }
        let b = ["--bootstrap-server", "h:1"]
        #expect(message(["replay", "t", "--since", "yesterday"] + b).contains("--since: 'yesterday' is not a time"))
        #expect(message(["replay", "t", "--from-offset", "9", "--to-offset", "3"] + b).contains("--to-offset (3) must be greater than --from-offset (9)"))
        #expect(message(["replay", "t", "--execute"] + b).contains("--execute applies to --to-topic"))
        #expect(message(["replay", "t", "--to-topic", "t"] + b).contains("into itself"))
        #expect(message(["replay", "t", "--header", "=x"] + b).contains("--header: '=x' is not name=value"))
        #expect(message(["dlq", "list", "--reason", "bad"] + b).contains("--reason: 'bad' is not a reason; use one of"))
        #expect(message(["dlq", "redrive", "--max-redrives", "0"] + b).contains("--max-redrives must be at least 1"))
        #expect(message(["lag", "--interval", "soon"] + b).contains("--interval: 'soon' is not a duration"))
        #expect(message(["groups", "reset-offsets", "g", "--topic", "t"] + b).contains("give exactly one of --to-earliest"))
        #expect(message(["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"] + b).contains("(got 2)"))
        #expect(message(["produce", "weather"]).contains("weather"))
        #expect(message(["produce", "prices", "/nonexistent.jsonl"]).contains("cannot read '/nonexistent.jsonl'"))
        let upbit = ["ingest", "upbit", "--codes", "KRW-BTC"] + b
        #expect(message(["ingest", "upbit"] + b).contains("--codes"))
        #expect(message(upbit + ["--url", "http://example.com/"]).contains("--url: 'http://example.com/' is not a WebSocket URL: the scheme must be ws or wss"))
        #expect(message(["ingest", "upbit", "--codes", "KRW-BTC,"] + b).contains("--codes: 'KRW-BTC,' is not a comma-separated list"))
        #expect(message(upbit + ["--ping-interval", "60s", "--idle-timeout", "30s"]).contains("--idle-timeout (30.0 seconds) must be longer than --ping-interval"))
        #expect(message(upbit + ["--duration", "soon"]).contains("--duration: 'soon' is not a duration"))
        #expect(message(upbit + ["--max-messages", "0"]).contains("--max-messages must be positive"))
        #expect(message(upbit).isEmpty, "valid")
        let poll = ["ingest", "poll", "products", "--url", "https://up.example/api/products"] + b
        #expect(message(poll).isEmpty, "valid")
        #expect(message(["ingest", "poll", "weather", "--url", "https://up.example/"] + b).contains("unknown source 'weather'; sources: campaigns, products, hangouts, challenges"))
        #expect(message(["ingest", "poll", "products", "--url", "ftp://up.example/x"] + b).contains("--url: not an http(s) URL"))
        #expect(message(poll + ["--interval", "5m", "--readiness-timeout", "1m"]).contains("--readiness-timeout (60.0 seconds) must not be shorter than --interval"))
        #expect(message(poll + ["--allow-network", "10.0.0.0/40"]).contains("--allow-network: '10.0.0.0/40' is not a network"))
        #expect(message(poll + ["--json"]).contains("--json prints the summary of --once"))
        #expect(message(poll + ["--page-size", "0"]).contains("--page-size must be positive"))
        #expect(message(["console", "--listen", "0.0.0.0:8090"] + b).contains("is not a loopback address: give tokens with --tokens-file, --token-file or PIPELINE_CONSOLE_TOKEN"))
        let tokens = FileManager.default.temporaryDirectory.appendingPathComponent("console-tokens-\(getpid())").path
        try? "alice: alice-token-0123456789 admin\n".write(toFile: tokens, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: tokens) }
        #expect(message(["console", "--tokens-file", tokens] + b).contains("--tokens-file: \(tokens):1: the role of 'alice' is 'admin'; it is viewer or operator"))
        #expect(message(["console", "--tokens-file", "/nonexistent/tokens"] + b).contains("--tokens-file: cannot read '/nonexistent/tokens'"))
        #expect(message(["console", "--listen", "nowhere"] + b).contains("--listen: 'nowhere' is not host:port"))
        #expect(message(["console"] + b).isEmpty, "valid")
        for name in ["http://console.example.org", "console.example.org:8090", "a/b", "", "a b", "[console]"] {
            #expect(message(["console", "--allowed-host", name] + b).contains("--allowed-host: '\(name)' is not a host name or an IP address"), "\(name)")
        }
        #expect(message(["console", "--allowed-host", "Console.Example.org", "--allowed-host", "10.1.2.3", "--allowed-host", "[::1]", "--allowed-host", "fd00::5"] + b).isEmpty)
    }

    @Test func bootstrapServerFromTheEnvironmentOrNamedWhenMissing() throws {
        if BootstrapServer<ExistingCluster>.environment == nil {
            #expect {
                _ = try PipelineCtl.parseAsRoot(["lag"])
            } throws: { error in
                PipelineCtl.message(for: error).contains("--bootstrap-server is required: pass --bootstrap-server host:port or set KAFKA_BOOTSTRAP_SERVERS")
            }
        }
        let lag = try #require(try PipelineCtl.parseAsRoot(["lag", "--bootstrap-server", "a:1,b:2", "--group", "g"]) as? Lag)
        #expect(lag.connection.servers == ["a:1", "b:2"])
        #expect(lag.groups == ["g"])
        let dry = try #require(try PipelineCtl.parseAsRoot(["produce", "prices", "--dry-run"]) as? Produce)
        #expect(dry.stream == .prices)
    }
}
